"""What a PopTorch plugin uses of the core beyond PopTorch's own API.

PopTorch Geometric is such a plugin. It registers the fixes shown when an
IPU rule breaks inside its code, asks for the user's input tensors of the
call being traced, and makes its refusals' tracebacks start at the user's
call, as the core's own do. None of these are PopTorch names, so they live
here rather than in ``poptorch``'s namespace.

Example::

    >>> from poptorch_core import plugins
    >>> @plugins.public_call
    ... def check(n: int) -> int:
    ...     if n < 0:
    ...         raise poptorch.Error("n must be >= 0")
    ...     return n
    >>> check(3)
    3
"""
from ._impl import traced_call_inputs
from ._tracing.library_code import register_known_fixes
from .errors import public_call, public_class, trimmed_refusal

__all__ = ["register_known_fixes", "traced_call_inputs", "public_call",
           "public_class", "trimmed_refusal"]
