"""FLOPs and bytes of each traced op: the inputs of the roofline.

Counting rules (per forward op, multiply-add = 2 FLOPs):

- matrix products (``mm``, ``addmm``, ``bmm``, ``matmul``, ``linear``, ...):
  ``2 x output elements x contracted size``;
- convolutions: ``2 x output elements x (input channels / groups) x kernel
  elements`` (the weight's shape without its first dimension);
- attention (``scaled_dot_product_attention``): two batched products,
  ``4 x batch x heads x L x S x E``;
- normalisations and softmaxes: 5 FLOPs per element (mean, variance,
  scale, shift / max, exp, sum, divide);
- any other op producing floating-point values: 1 FLOP per output element;
- views, ``getitem``, in-place markers and integer ops: no FLOPs.

Bytes are everything the op reads and writes: its tensor inputs and
outputs. Matrix products and convolutions also need temporary memory on the
IPU (their planner re-lays out the operands and keeps partial sums, bounded
by ``availableMemoryProportion``): :func:`op_temporary_bytes`.

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda a, b: torch.mm(a, b).relu())(
    ...     torch.ones(8, 16), torch.ones(16, 4))
    >>> [op_flops(n) for n in gm.graph.nodes if n.op == "call_function"]
    [1024, 32]
"""
import math
from typing import Any, List

import torch
import torch.fx
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten

_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm",
            "einsum", "dot", "mv", "addmv", "vdot"}
_CONVS = {"convolution", "conv1d", "conv2d", "conv3d", "_convolution",
          "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}
_NORMS = {"layer_norm", "native_layer_norm", "batch_norm",
          "native_batch_norm", "_native_batch_norm_legit",
          "_native_batch_norm_legit_no_training", "group_norm",
          "native_group_norm", "instance_norm", "softmax", "_softmax",
          "log_softmax", "_log_softmax", "cross_entropy_loss", "rms_norm"}
_ATTENTION = {"scaled_dot_product_attention",
              "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention"}


def op_name(node: torch.fx.Node) -> str:
    """The ATen op's base name (``"addmm"`` for ``aten.addmm.default``),
    or ``""`` for nodes that are not ops."""
    if node.op != "call_function":
        return ""
    packet = getattr(node.target, "_overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(
        node.target, "__name__", "")
    return name.split(".")[-1]


def tensors_in(value: Any) -> List[torch.Tensor]:
    """The tensors among the leaves of ``value`` (a node's ``meta['val']``)."""
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _vals(nodes: Any) -> List[torch.Tensor]:
    return tensors_in([n.meta.get("val") for n in tree_leaves(nodes)
                     if isinstance(n, torch.fx.Node)])


def _numel(tensors: List[torch.Tensor]) -> int:
    return sum(t.numel() for t in tensors)


def is_view(node: torch.fx.Node) -> bool:
    """Whether ``node`` only aliases its input (view, getitem, in place)."""
    if node.op != "call_function":
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None:  # getitem, grad-mode switches: no tensor of its own
        return True
    return any(r.alias_info is not None for r in schema.returns)


def is_matmul_like(node: torch.fx.Node) -> bool:
    """Matrix products and convolutions (the ops that use temporary memory
    under ``availableMemoryProportion``)."""
    name = op_name(node)
    return name in _MATMULS or name in _CONVS or name in _ATTENTION


def op_flops(node: torch.fx.Node) -> int:
    """Floating-point operations of one forward execution of ``node``."""
    name = op_name(node)
    outputs = tensors_in(node.meta.get("val"))
    if not name or is_view(node) or not outputs:
        return 0
    inputs = _vals(node.args)
    if name in _MATMULS and inputs:
        return 2 * _numel(outputs[:1]) * int(inputs[0].shape[-1]) \
            if inputs[0].dim() else 2 * _numel(inputs)
    if name in _CONVS and len(inputs) > 1:
        return 2 * _numel(outputs[:1]) * math.prod(inputs[1].shape[1:])
    if name in _ATTENTION and len(inputs) >= 3:
        query, key = inputs[0], inputs[1]
        return 4 * math.prod(query.shape[:-1]) * int(key.shape[-2]) * \
            int(query.shape[-1])
    floats = [t for t in outputs if t.dtype.is_floating_point]
    if name in _NORMS:
        return 5 * _numel(floats)
    return _numel(floats)


def op_bytes(node: torch.fx.Node) -> int:
    """Bytes ``node`` reads and writes (0 for views)."""
    if is_view(node):
        return 0
    tensors = _vals(node.args) + _vals(list(node.kwargs.values())) + \
        tensors_in(node.meta.get("val"))
    return sum(t.numel() * t.element_size() for t in tensors)


def op_is_half(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes in 16-bit floats (FP16 peak applies)."""
    outputs = tensors_in(node.meta.get("val"))
    return any(t.dtype in (torch.float16, torch.bfloat16) for t in outputs)


def _is_weight(node: Any) -> bool:
    """A parameter or buffer, possibly through views (``t()``, ...)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" \
            and is_view(node) and node.args:
        node = node.args[0]
    return isinstance(node, torch.fx.Node) and node.op == "placeholder" and \
        node.meta.get("poptorch_kind") in ("parameter", "buffer")


def op_temporary_bytes(node: torch.fx.Node) -> int:
    """Temporary memory a matrix product or convolution asks for: a
    re-laid-out copy of its computed operands (weights are created in the
    layout their product wants) plus float32 partial sums of its output
    (0 for other ops)."""
    if not is_matmul_like(node):
        return 0
    operands = _vals([a for a in tree_leaves(node.args)
                      if isinstance(a, torch.fx.Node) and not _is_weight(a)])
    outputs = tensors_in(node.meta.get("val"))
    return sum(t.numel() * t.element_size() for t in operands) + \
        4 * _numel(outputs[:1])
