"""Host constants and IPU values while a model is traced.

While PopTorch traces a model, only tensors that live on the IPU are
captured into the graph: the parameters, the buffers, the inputs and every
value computed from them, plus tensors created inside ``forward`` by a
factory (``torch.zeros(n)``, ``torch.arange(n)``, ``x.new_zeros(n)``).
Those are **IPU values**: they have no data on the host while the model is
compiled, so reading one back (``.item()``, ``if t.sum() > 0``) or moving
one to the CPU is an error.

Every other tensor is a **host constant**: a tensor captured from Python (a
closure, a module attribute that is not a buffer, a global) or created with
an explicit CPU device. Operations on host constants alone run on the host
at once, as in eager PyTorch, so ``step.item()``, ``if const.sum() > 0``
and ``x[1:n:step.item()]`` work. A captured host constant used together
with IPU values becomes a constant of the graph. A tensor created inside
``forward`` with an explicit CPU device is a CPU tensor, and using it with
IPU values raises PopTorch's ``"Expected an IPU tensor but got ..."``;
``.to(x.device)`` (or ``.to("ipu")``) moves it to the IPU.

In the simulator the IPU's tensors live on the host device, so
``x.device`` is that device (``cpu`` unless
``opts.Simulator.hostDevice("cuda")``): a ``torch.device`` object equal to
it means the IPU, and only the *string* ``"cpu"`` (or ``.cpu()``) asks for
the CPU.

Example::

    >>> step = torch.tensor(2)                  # a host constant
    >>> class Model(torch.nn.Module):
    ...     def forward(self, x):
    ...         return x[0:8:step.item()]       # read on the host: fine
    >>> poptorch.inferenceModel(Model())(torch.arange(8.))
    tensor([0., 2., 4., 6.])
"""
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental import proxy_tensor as _proxy


def active_tracer() -> Optional[Any]:
    """The ``make_fx`` tracer capturing the model, or None outside it."""
    mode = _proxy.get_proxy_mode()
    return None if mode is None else mode.tracer


def tensor_leaves(args: Sequence[Any], kwargs: Dict[str, Any]
                  ) -> List[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves((list(args), kwargs))
            if isinstance(leaf, torch.Tensor)]


def is_ipu_value(tensor: torch.Tensor, tracer: Any) -> bool:
    """Whether ``tensor`` is captured in the graph (an IPU value)."""
    return _proxy.has_proxy_slot(tensor, tracer)


def graph_node(tensor: torch.Tensor, tracer: Any) -> Optional[torch.fx.Node]:
    """The graph node that computes the IPU value ``tensor``."""
    if not is_ipu_value(tensor, tracer):
        return None
    return _proxy.get_proxy_slot(tensor, tracer).proxy.node


def run_on_host(func: Callable, args: Sequence[Any],
                kwargs: Dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` evaluated now, outside the graph."""
    with _proxy.disable_proxy_modes_tracing():
        return func(*args, **kwargs)


def describe(tensor: torch.Tensor) -> str:
    """PopTorch's short form: ``tensor(device=cpu, shape=[2], dtype=Long)``."""
    dtype = tensor.new_empty(0).type().rsplit(".", 1)[-1]
    dtype = dtype[:-len("Tensor")] if dtype.endswith("Tensor") else dtype
    return (f"tensor(device={tensor.device.type}, shape={list(tensor.shape)}, "
            f"dtype={dtype})")


class Devices:
    """What a ``device`` argument means while tracing, for the simulated
    IPU whose tensors live on ``host_device``."""

    def __init__(self, host_device: torch.device):
        self.host = torch.device(host_device)

    def _as_device(self, value: Any) -> Optional[torch.device]:
        if isinstance(value, torch.device):
            return value
        if isinstance(value, str):
            try:
                return torch.device(value)
            except RuntimeError:
                return None
        return None

    def is_ipu(self, value: Any) -> bool:
        """``"ipu"``/``torch.device("ipu")``, or a device equal to the host
        device given as a ``torch.device`` (what ``x.device`` returns)."""
        device = self._as_device(value)
        if device is None:
            return False
        if device.type == "ipu":
            return True
        return isinstance(value, torch.device) and \
            device.type == self.host.type and \
            device.index in (None, self.host.index or 0)

    def is_cpu(self, value: Any) -> bool:
        """An explicit request for the CPU (not the IPU's own device)."""
        device = self._as_device(value)
        return device is not None and device.type == "cpu" and \
            not self.is_ipu(value)

    def map_ipu(self, args: Sequence[Any], kwargs: Dict[str, Any]):
        """``args, kwargs`` with every IPU device replaced by the host
        device, so that torch can place the tensors."""
        def fix(value):
            if isinstance(value, (str, torch.device)) and \
                    self._as_device(value) is not None and \
                    self._as_device(value).type == "ipu":
                return self.host
            return value
        args = tuple(fix(a) for a in args)
        kwargs = {k: fix(v) if k == "device" else v for k, v in kwargs.items()}
        return args, kwargs


class CpuTensors:
    """Tensors created inside ``forward`` on an explicitly requested CPU,
    and the host values computed from them."""

    def __init__(self) -> None:
        # Keyed by id (a tensor's == is elementwise); weak, so an id reused
        # after a tensor dies is never mistaken for it.
        self._tensors: "weakref.WeakValueDictionary[int, torch.Tensor]" = \
            weakref.WeakValueDictionary()

    def mark(self, result: Any) -> Any:
        for leaf in pytree.tree_leaves(result):
            if isinstance(leaf, torch.Tensor):
                self._tensors[id(leaf)] = leaf
        return result

    def is_marked(self, tensor: torch.Tensor) -> bool:
        return self._tensors.get(id(tensor)) is tensor

    def any_marked(self, tensors: Iterable[torch.Tensor]) -> bool:
        return any(self.is_marked(t) for t in tensors)

    def first_mixed(self, tensors: Iterable[torch.Tensor]
                    ) -> Optional[torch.Tensor]:
        """A CPU tensor that an op uses together with IPU values (0-dim
        tensors are scalars, which the IPU takes as constants)."""
        for tensor in tensors:
            if self.is_marked(tensor) and tensor.dim() > 0:
                return tensor
        return None
