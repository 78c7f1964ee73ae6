"""``traceModel``: inspect a model's IPU graph without running it."""
from typing import Any, Optional

import torch

from .. import _dtypes
from .._args_parser import flattenTensors
from ..errors import createPoptorchError, public_call
from .._tracing.capture import capture_module, ipu_arguments, module_state
from .ir import Ir

__all__ = ["traceModel"]


@public_call
def traceModel(model: torch.nn.Module, *args: Any, training: bool = False,
               options: Optional[Any] = None, **kwargs: Any) -> Ir:
    """Traces ``model(*args, **kwargs)`` as PopTorch compiles it and returns
    an :class:`Ir` whose ``main_graph`` holds the captured graph.

    The inputs are one micro-batch. They get IPU dtypes first (int64 becomes
    int32, float64 becomes float32), the IPU rules are checked (an
    :class:`~poptorch_core.Error` names the op and your source line) and, with
    ``training=True``, the model must return exactly one final loss. The
    model itself is left unchanged.

    Example::

        >>> model, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
        >>> ir = poptorch.traceModel(model, x)
        >>> [s.shape for s in ir.get_all_h2d_streams()]   # the input x
        [(3, 4)]
        >>> g = ir.main_graph    # inputs: the weights, then the model's
        >>> torch.allclose(g(model.weight, model.bias, x), model(x))
        True
    """
    if not isinstance(model, torch.nn.Module):
        raise createPoptorchError(
            f"traceModel traces a torch.nn.Module, got "
            f"{type(model).__name__}: pass the model object itself.")
    device = torch.device(options.Simulator.host_device if options is not None
                          else "cpu")
    excludes = options.source_location_excludes if options is not None \
        else ()
    call_args, call_kwargs = ipu_arguments(args, kwargs, device)
    params, param_names, buffers, buffer_names = module_state(model)
    captured = capture_module(
        model, call_args, call_kwargs, training=training, device=device,
        params=[_dtypes.to_ipu(p.detach(), n[0], device).requires_grad_(
            p.requires_grad) for p, n in zip(params, param_names)],
        buffers=[_dtypes.to_ipu(b, n[0], device)
                 for b, n in zip(buffers, buffer_names)],
        excludes=excludes,
        call_inputs=flattenTensors((list(args), dict(kwargs))))
    ir = Ir()
    ir._adopt_main_graph(captured.graph_module)
    return ir
