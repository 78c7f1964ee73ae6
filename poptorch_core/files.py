"""Writing files so that a failure never loses the previous version.

Every file the package writes (saved models, DOT files, dataset caches,
benchmark records) goes through :func:`atomic_write`: the bytes go to a
temporary file in the target's directory, are flushed and fsynced, and the
temporary file is then renamed over the target. A write that fails part way
(a full disk, a size limit, Ctrl-C) leaves the previous file as it was, and
no temporary file behind.

Otherwise the file ends as ``open(path, "w")`` would leave it:

* a symbolic link stays a link, and its target gets the new contents;
* an existing file keeps its permission bits (and its owner, where the
  process may set it); a new one gets ``0o666`` less the umask;
* a target that is not a regular file (a directory, a FIFO, a device, a
  socket) is refused with an :class:`~poptorch_core.Error`, as a rename
  would replace it with a regular file;
* errors name the path the caller gave, never the temporary file.

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
import secrets
import stat
from typing import IO, Iterator, Optional, Tuple

from .errors import createPoptorchError

__all__ = ["atomic_write"]

#: What a path that is not a regular file is, for the error.
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | \
    getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def atomic_write(path: "os.PathLike[str] | str", mode: str = "wb",
                 encoding: "str | None" = None) -> Iterator[IO]:
    """Opens a temporary file next to the file ``path`` names (the target
    of a link) for writing; on a clean exit it is flushed, fsynced and
    renamed over that file, on any exception (``KeyboardInterrupt``
    included) it is removed and the file is left untouched."""
    path = os.fspath(path)
    real = os.path.realpath(path)
    tmp = None
    try:
        existing = _existing_regular_file(path, real)
        fd, tmp = _create_temporary(real, existing)
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException as error:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _name_the_users_path(error, path, (None, tmp, real))
        raise
    _fsync_directory(os.path.dirname(real))


def _existing_regular_file(path: str, real: str
                           ) -> Optional[os.stat_result]:
    """The file ``real`` (which ``path`` names) as it is now; None if
    there is none. Anything but a regular file is an error."""
    try:
        found = os.stat(real)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(found.st_mode):
        return found
    kind = next((name for test, name in _KINDS if test(found.st_mode)),
                "a special file")
    where = f"it links to {real}, which is" if os.path.islink(path) \
        else "it is"
    raise createPoptorchError(
        f"Cannot write {path}: {where} {kind}, not a regular file. Writing "
        "it would replace it with a regular file (and break whatever uses "
        "it): give the path of a regular file, or of none yet.")


def _create_temporary(real: str, existing: Optional[os.stat_result]
                      ) -> Tuple[int, str]:
    """A new file next to ``real``, with the mode (and owner) that
    ``real`` has, or the mode ``open()`` would give a new file. Its name
    starts with a dot, so that directory listings skip it."""
    # Never more open than the final file: the kernel applies the umask
    # to these bits, and fchmod then sets the existing file's exactly.
    create_mode = stat.S_IMODE(existing.st_mode) & 0o777 \
        if existing is not None else 0o666
    directory, name = os.path.split(real)
    for _ in range(100):
        tmp = os.path.join(directory,
                           f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, _CREATE_FLAGS, create_mode)
        except FileExistsError:
            continue
        except OSError as error:
            # About the file to write (a directory that is missing or
            # read-only): the caller names it.
            error.filename = real
            raise
        try:
            if existing is not None:
                _keep_owner_and_mode(fd, existing)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return fd, tmp
    raise FileExistsError(f"no free temporary name next to {real}")


def _keep_owner_and_mode(fd: int, existing: os.stat_result) -> None:
    if (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
        # Only a privileged process may give a file away: others keep
        # their own, as a file they create would be.
        with contextlib.suppress(PermissionError):
            os.fchown(fd, existing.st_uid, existing.st_gid)
    # After fchown, which clears the set-user-ID bits.
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))


def _name_the_users_path(error: BaseException, path: str,
                         ours: Tuple[Optional[str], ...]) -> None:
    """An ``OSError`` about one of ``ours`` (the temporary file, the file
    a link names, or no file: a full disk) names ``path`` instead; one
    about another file is left alone."""
    if not isinstance(error, OSError) or error.filename not in ours:
        return
    if error.errno is None:
        error.add_note(f"While writing {path}")
        return
    error.filename, error.filename2 = path, None


def _fsync_directory(directory: str) -> None:
    """Makes the rename itself durable (where the platform allows)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
