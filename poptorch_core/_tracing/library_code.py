"""Library frames in IPU-rule errors, and the known fixes libraries register.

When an IPU rule breaks inside a library (PyG's ``GCNConv`` adding
self-loops with a boolean mask, ``global_mean_pool`` counting graphs with
``.item()``), the user's own line alone does not explain the error. The
error then also shows the library frame the user's line called and the one
where the op ran, and, when a registered table knows the case, the fix the
user can apply. Tables are data: ``(path fragment, function or None, fix)``
rows, matched against the library frames from the outermost (the layer the
user called) inwards; the first match wins.

Example::

    >>> import traceback
    >>> register_known_fixes(
    ...     [("mylib/layers.py", None, "Pass size= to MyLayer.")],
    ...     library_dirs=["/opt/mylib/"])
    >>> frames = [traceback.FrameSummary("/home/me/model.py", 3, "forward",
    ...                                  line="return self.layer(x)"),
    ...           traceback.FrameSummary("/opt/mylib/layers.py", 40,
    ...                                  "forward", line="n = int(x.max())")]
    >>> is_library("/opt/mylib/layers.py"), is_library("/home/me/model.py")
    (True, False)
    >>> known_fix(frames)
    'Pass size= to MyLayer.'
"""
import os
import traceback
from typing import Iterable, List, Optional, Sequence, Tuple

#: A known-fix row: a path fragment (``/``-separated) of the library file,
#: the function name (None: any) and the fix, in words.
KnownFix = Tuple[str, Optional[str], str]

_known_fixes: List[KnownFix] = []
_library_dirs: List[str] = []
_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def register_known_fixes(table: Iterable[KnownFix],
                         library_dirs: Iterable[str] = ()) -> None:
    """Adds rows to the known-fix table; files under ``library_dirs`` count
    as library code (as installed packages do)."""
    for path, function, fix in table:
        if not isinstance(path, str) or not isinstance(fix, str):
            raise TypeError("A known fix is (path fragment, function name or "
                            f"None, fix text), got {(path, function, fix)!r}.")
        row = (path, function, fix)
        if row not in _known_fixes:
            _known_fixes.append(row)
    for directory in library_dirs:
        directory = os.path.abspath(directory).rstrip(os.sep) + os.sep
        if directory not in _library_dirs:
            _library_dirs.append(directory)


def is_library(filename: str) -> bool:
    """Whether ``filename`` is library code rather than the user's."""
    path = os.path.abspath(filename)
    return any(part in path for part in _INSTALLED) or \
        path.startswith(tuple(_library_dirs))


def known_fix(frames: Sequence[traceback.FrameSummary]) -> Optional[str]:
    """The fix of the first registered row matching a frame, outermost
    frame first."""
    for frame in frames:
        path = os.path.abspath(frame.filename).replace(os.sep, "/")
        for fragment, function, fix in _known_fixes:
            if fragment in path and function in (None, frame.name):
                return fix
    return None


def _format(frame: traceback.FrameSummary) -> str:
    code = f"\n      {frame.line.strip()}" if frame.line else ""
    return f"{frame.filename}:{frame.lineno} in {frame.name}{code}"


def describe(library: Sequence[traceback.FrameSummary]) -> str:
    """The library frames below the user's line (outermost first) and the
    known fix, formatted for an error message ("" for none)."""
    if not library:
        return ""
    text = f"\n  in library code called from that line: {_format(library[0])}"
    if len(library) > 1:
        text += f"\n  where the op runs: {_format(library[-1])}"
    fix = known_fix(library)
    if fix is not None:
        text += f"\n  Known fix: {fix}"
    return text
