"""How a captured graph is run: the ``interpret`` and ``compile`` backends.

``interpret`` calls the traced ``GraphModule`` directly (its generated Python
code calls the ATen ops, without ``nn.Module`` dispatch). ``compile`` runs it
through ``torch.compile`` with static shapes; because the executor only ever
feeds it micro-batches of the compile-time shapes, it compiles exactly once.
On the CPU, row scatter-adds (message-passing sums, gather gradients) stay
ATen ops and ``relu``'s backward saves no boolean mask, two things
inductor's generated CPU code does slowly (``_cpu_inductor``).
"""
from typing import Callable, List, Sequence

import torch
import torch.fx

from ._isa_probe import start_vec_isa_probe, wait_for_vec_isa_probe

__all__ = ["BACKENDS", "compilation_count", "prepare_backend"]

BACKENDS = ("interpret", "compile")


def prepare_backend(backend: str, host_device: str) -> None:
    """Starts what a backend can do before the first compilation: for
    ``compile`` on the CPU, inductor's vector-ISA check (``_isa_probe``),
    which then runs while the model is traced."""
    if backend == "compile" and torch.device(host_device).type == "cpu":
        start_vec_isa_probe()


_compilations = 0


def compilation_count() -> int:
    """Number of graphs the ``compile`` backend has compiled in this
    process (each ``torch.compile`` backend invocation counts once)."""
    return _compilations


def _counting_inductor(gm: torch.fx.GraphModule, example_inputs):
    global _compilations
    _compilations += 1
    from torch._inductor.compile_fx import compile_fx
    options = {}
    if all(t.device.type == "cpu" for t in example_inputs
           if isinstance(t, torch.Tensor)):
        from ._cpu_inductor import compile_fx_options
        options = compile_fx_options()
        # Before compile_fx: on a cache hit, loading the cached kernels
        # already needs inductor's ISA list.
        wait_for_vec_isa_probe()
    return compile_fx(gm, example_inputs, **options)


class Executable:
    """A runnable form of a captured graph.

    ``run(tensors)`` takes the flat placeholder values (parameters, buffers,
    inputs) and returns the graph's outputs as a list.
    """

    def __init__(self, graph_module: torch.fx.GraphModule, backend: str):
        if backend not in BACKENDS:
            raise ValueError(f"Unknown simulator backend {backend!r}: "
                             f"expected one of {BACKENDS}")
        self.backend = backend
        self.graph_module = graph_module
        self.compilations = 0
        if backend == "compile":
            # The graph module itself, not a shared wrapper method: dynamo
            # caches per code object, and every GraphModule has its own
            # forward, so each model compiles once however many a process
            # builds (a shared method hit dynamo's recompile limit at 8).
            self._fn: Callable = torch.compile(
                graph_module, backend=_counting_inductor, dynamic=False,
                fullgraph=True)
        else:
            self._fn = graph_module

    def run(self, tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """The graph's outputs, as a list, for ``tensors`` (parameters,
        buffers, then inputs). The ``compile`` backend compiles on the first
        call."""
        if self.backend == "compile":
            before = _compilations
            out = self._fn(*tensors)
            self.compilations += _compilations - before
            return list(out)
        return list(self._fn(*tensors))
