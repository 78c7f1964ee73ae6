"""Writing files so that a failure never loses the previous version.

Every file the package writes (saved models, DOT files, dataset caches,
benchmark records) goes through :func:`atomic_write`: the bytes go to a
temporary file in the target's directory, are flushed and fsynced, and the
temporary file is then renamed over the target. A write that fails part way
(a full disk, a size limit, Ctrl-C) leaves the previous file as it was, and
no temporary file behind.

Example::

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "notes.txt")
    >>> with atomic_write(path, "w") as f:
    ...     _ = f.write("first")
    >>> try:
    ...     with atomic_write(path, "w") as f:
    ...         _ = f.write("half-writ")
    ...         raise KeyboardInterrupt
    ... except KeyboardInterrupt:
    ...     pass
    >>> open(path).read()
    'first'
    >>> os.listdir(os.path.dirname(path))
    ['notes.txt']
"""
import contextlib
import os
import tempfile
from typing import IO, Iterator

__all__: list = []


@contextlib.contextmanager
def atomic_write(path: "os.PathLike[str] | str", mode: str = "wb",
                 encoding: "str | None" = None) -> Iterator[IO]:
    """Opens a temporary file next to ``path`` for writing; on a clean
    exit it is flushed, fsynced and renamed over ``path``, on any exception
    (``KeyboardInterrupt`` included) it is removed and ``path`` is left
    untouched."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Makes the rename itself durable (where the platform allows)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
