"""Row scatter-adds as a plain loop in the compiled C++, not ATen's kernel.

A message-passing sum adds edge rows into node rows, and every gather's
gradient (``index_select``, embeddings) adds rows back into the rows they
were read from: ``scatter_add`` along dim 0 of a float32 matrix with an index
expanded along the columns. Inductor calls ATen's kernel for these
(``inductor.cpu``), which sorts the index and then sums each output row's
segment, through its C shim. For the small tables and batches of a GNN
training step, one pass over the index in order, adding each source row to
its output row, is faster (``docs/design/compile_backend.rst`` has the
figures). The sums are the same, bit for bit: ATen's sort is stable, so
each output row adds its source rows in index order, as the loop does.

While :func:`fast_row_scatters` is active in a thread, inductor's C++
wrapper (``cpp_wrapper``) writes such a scatter as a call of
:data:`KERNEL_SOURCE`, compiled at -O3 with the graph's kernels, instead of
the ATen call. Only exact equivalents are taken (:func:`row_scatter_shape`):
``scatter_reduce_`` with ``sum`` and ``include_self``, dim 0, a contiguous
float32 ``[rows, width]`` output and a contiguous float32 ``[n, width]``
source that are not the same buffer, ``width`` at most :data:`MAX_WIDTH`,
and an int64 ``[n, width]`` index whose columns repeat its first (stride 0
along dim 1), all of static shape. Every other scatter stays ATen's. An
index out of range raises ATen's message (``index 7 is out of bounds for
dimension 0 with size 5``) before any row is added.

The loop runs on one thread: at a GNN's sizes the work is too small to
split between threads, so rows wider than :data:`MAX_WIDTH` stay ATen's,
whose kernel does. With one thread inductor calls no ATen scatter (it
writes its own serial loop), and nothing changes.

Example::

    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from poptorch_core._executor.backends.executable import \\
    ...     _compile_with_inductor
    >>> def aggregate(messages, index):
    ...     out = messages.new_zeros(3, 4)
    ...     return out.scatter_add_(0, index.view(-1, 1).expand(-1, 4),
    ...                             messages),
    >>> messages, index = torch.ones(5, 4), torch.tensor([0, 2, 2, 1, 2])
    >>> graph = make_fx(aggregate)(messages, index)
    >>> compiled = _compile_with_inductor(graph, [messages, index])
    >>> compiled(messages, index)[0][:, 0].tolist()
    [1.0, 1.0, 3.0]
"""
import contextlib
import functools
import threading
from typing import Iterator, Optional, Tuple

import torch

KERNEL_NAME = "poptorch_row_scatter_add"

#: The widest rows the loop takes. Wider ones stay ATen's, which splits
#: the work between threads and wins on wide rows (Cora's 1,433 feature
#: columns).
MAX_WIDTH = 128

#: The loop, compiled into the graph's kernel object. It checks the whole
#: index before adding a row, so an out-of-range index leaves the output
#: as it was. Vectorised by hand: inductor builds its kernels with
#: ``-fno-tree-loop-vectorize``, which leaves a plain loop slower than
#: ATen's kernel.
KERNEL_SOURCE = f"""
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C" bool {KERNEL_NAME}(
    float* __restrict__ out, const int64_t* __restrict__ index,
    int64_t index_stride, const float* __restrict__ src, int64_t rows,
    int64_t out_rows, int64_t width, int64_t* bad_index) {{
  for (int64_t k = 0; k < rows; ++k) {{
    const int64_t row = index[k * index_stride];
    if (row < 0 || row >= out_rows) {{
      *bad_index = row;
      return false;
    }}
  }}
  using Vec = at::vec::Vectorized<float>;
  const int64_t whole = width - width % Vec::size();
  for (int64_t k = 0; k < rows; ++k) {{
    float* to = out + index[k * index_stride] * width;
    const float* from = src + k * width;
    int64_t c = 0;
    for (; c < whole; c += Vec::size()) {{
      (Vec::loadu(to + c) + Vec::loadu(from + c)).store(to + c);
    }}
    for (; c < width; ++c) to[c] += from[c];
  }}
  return true;
}}
"""

#: What the C++ wrapper sees: the loop's declaration, and the data pointer
#: of whatever handle inductor writes for a tensor (an RAII handle, a
#: constant, or a plain ``AtenTensorHandle``).
KERNEL_DECLARATION = f"""
extern "C" bool {KERNEL_NAME}(float*, const int64_t*, int64_t, const float*,
                              int64_t, int64_t, int64_t, int64_t*);
template <typename Handle>
static inline void* {KERNEL_NAME}_data(const Handle& handle) {{
  return handle.data_ptr();
}}
static inline void* {KERNEL_NAME}_data(AtenTensorHandle handle) {{
  void* data;
  AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_data_ptr(handle, &data));
  return data;
}}
"""

_SUM_KERNEL = "aten.scatter_reduce_.two"


class _RowScatters(threading.local):
    """Whether the patch is active in this thread."""

    active = False


_ACTIVE = _RowScatters()


#: How many scatters the patch has written as the loop, all threads
#: together (the tests' evidence that it applied).
_emitted = 0


def _static(values) -> Optional[Tuple[int, ...]]:
    """``values`` (sizes or strides) as ints, None when one is symbolic."""
    try:
        return tuple(int(v) for v in values)
    except TypeError:
        return None


def row_scatter_shape(node) -> Optional[Tuple[int, int, int, int]]:
    """``(rows, width, n, index_stride)`` of a ``ScatterFallback`` IR node
    that the loop computes exactly (see the module docstring), else
    None."""
    if node.python_kernel_name != _SUM_KERNEL or not node.src_is_tensor or \
            node.kwargs.get("reduce") != "sum" or \
            node.kwargs.get("include_self") is not True or \
            node.constant_args[0] != 0 or len(node.inputs) != 3:
        return None
    out, index, src = node.inputs
    device = out.get_device()
    if device is None or device.type != "cpu" or \
            out.get_dtype() != torch.float32 or \
            src.get_dtype() != torch.float32 or \
            index.get_dtype() != torch.int64 or \
            out.get_name() == src.get_name():
        return None
    shapes = [(_static(t.get_size()), _static(t.get_stride()))
              for t in (out, index, src)]
    if any(size is None or stride is None or len(size) != 2
           for size, stride in shapes):
        return None
    (out_size, out_stride), (index_size, index_stride), \
        (src_size, src_stride) = shapes
    rows, width = out_size
    n = src_size[0]
    if width > MAX_WIDTH or src_size != (n, width) or \
            index_size != (n, width) or out_stride[0] != width or \
            src_stride[0] != width:
        return None
    # A column stride means nothing in a matrix of one column.
    if width != 1 and (out_stride[1], src_stride[1],
                       index_stride[1]) != (1, 1, 0):
        return None
    return rows, width, n, index_stride[0]


def _call_line(node, shape: Tuple[int, int, int, int]) -> str:
    """The C++ wrapper's statement that runs the loop for ``node``."""
    rows, width, n, index_stride = shape
    out, index, src = (t.codegen_reference() for t in node.inputs)
    data = f"{KERNEL_NAME}_data"
    return (
        f"{{ int64_t bad_index; if (!{KERNEL_NAME}("
        f"(float*){data}({out}), (const int64_t*){data}({index}), "
        f"{index_stride}L, (const float*){data}({src}), {n}L, {rows}L, "
        f"{width}L, &bad_index)) throw std::runtime_error(\"index \" + "
        "std::to_string(bad_index) + \" is out of bounds for dimension 0 "
        f"with size {rows}\"); }}")


@functools.lru_cache(maxsize=None)
def _line_class() -> type:
    """The wrapper line that writes :func:`_call_line` when the wrapper
    generates its code, as inductor's ``ScatterFallbackLine`` writes the
    ATen call (made on first use: importing this module does not import
    inductor)."""
    from torch._inductor.codegen.wrapper import WrapperLine

    class RowScatterLine(WrapperLine):
        def __init__(self, wrapper, node, shape):
            self.wrapper, self.node, self.shape = wrapper, node, shape

        def codegen(self, code) -> None:
            code.writeline(_call_line(self.node, self.shape))

    return RowScatterLine


_INSTALL_LOCK = threading.Lock()


def _install() -> None:
    """Wraps ``CppWrapperCpu.generate_scatter_fallback`` once; the wrapper
    does anything new only in threads where the patch is active."""
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    with _INSTALL_LOCK:
        original = CppWrapperCpu.generate_scatter_fallback
        if not getattr(original, "_poptorch_row_scatter", False):
            CppWrapperCpu.generate_scatter_fallback = _wrapped(
                CppWrapperCpu, original)


def _wrapped(wrapper_class: type, original):
    """``original`` (``wrapper_class.generate_scatter_fallback``), writing
    the loop instead where it applies."""

    def generate_scatter_fallback(self, node) -> None:
        shape = row_scatter_shape(node) \
            if _ACTIVE.active and type(self) is wrapper_class else None
        if shape is None:
            original(self, node)
            return
        if not getattr(self, "_poptorch_row_scatter_defined", False):
            # As inductor's own kernels: the body goes with the kernels
            # (-O3), the "definition" (a declaration) with the wrapper.
            self.define_kernel(KERNEL_NAME, KERNEL_SOURCE, gpu=False,
                               cpp_definition=KERNEL_DECLARATION)
            self._poptorch_row_scatter_defined = True
        self.writeline(_line_class()(self, node, shape))
        global _emitted
        _emitted += 1

    generate_scatter_fallback._poptorch_row_scatter = True
    return generate_scatter_fallback


def emitted() -> int:
    """How many row scatter-adds compilations have written as the loop."""
    return _emitted


@contextlib.contextmanager
def fast_row_scatters() -> Iterator[None]:
    """Inductor compilations in this thread, inside the block, write
    eligible row scatter-adds as the loop (see the module docstring)."""
    _install()
    before = _ACTIVE.active
    _ACTIVE.active = True
    try:
        yield
    finally:
        _ACTIVE.active = before
