"""Replication across processes and machines, on ``torch.distributed``.

Launch the same PopTorch program once per process, e.g. with
``torchrun --nproc_per_node 2 train.py`` (or PopRun/mpirun with
``MASTER_ADDR``/``MASTER_PORT`` exported, or ``configureProcessId``).
``options.Distributed`` reads each process's id and the process count;
``replicationFactor`` stays the number of replicas of one process, so the
run has ``replicationFactor x processes`` replicas in all:

- the process group starts when the first training model compiles (gloo
  on the CPU, NCCL with ``Simulator.hostDevice("cuda")``) and ends at exit;
- at compile time the processes check that they compiled the same model
  with the same options and input shapes, and take process 0's weights;
- every optimizer step sums the gradients over all processes, with the
  same ``Mean``/``Sum`` rule as the replicas of one process;
- outputs are those of the process's own replicas, as with PopRun;
- ``poptorch.DataLoader`` (and the PopTorch Geometric loaders) give each
  process its own share of the data;
- if a process dies or hangs, the others raise ``poptorch.Error`` naming
  it within about ``Simulator.distributedTimeout`` seconds (default 60).

Example (a run of one process: nothing to exchange, same results)::

    >>> opts = poptorch.Options()
    >>> _ = opts.Distributed.configureProcessId(0, 1)
    >>> poptorch.distributed.is_initialized()
    False
"""
from .._executor.scale_out_hook import install as _install_scale_out
from ._group import is_initialized, shutdown
from ._join import join

__all__ = ["is_initialized", "shutdown"]

_install_scale_out(join)
