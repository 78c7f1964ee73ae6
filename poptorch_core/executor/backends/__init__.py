"""How a captured graph runs on the host: the ``interpret`` and ``compile``
backends (``_executable``) and the passes that prepare a graph for them.

``_lowering`` rewrites PopTorch's marker ops to ATen and drops arithmetic
identities; ``_wide_inputs`` finds int64 inputs that may skip the int32
round trip; ``_training_step`` traces a training micro-batch's forward
pass, loss seed and gradients as one graph for ``compile``, and
``_fused_adam`` the same with the optimizer's Adam update in it;
``_cpu_inductor`` holds the ``compile`` backend's CPU passes;
``_isa_probe`` runs inductor's CPU vector-ISA check while the first graph
is traced; ``_background_builds`` builds the compiled C++ libraries while
the rest of a compilation goes on; ``_host_memory`` keeps freed host
memory for the next step; ``_aliasing`` answers which graph values share
memory.
"""
from ._executable import (BACKENDS, Executable, compilation_count,
                          prepare_backend)

__all__ = ["BACKENDS", "Executable", "compilation_count", "prepare_backend"]
