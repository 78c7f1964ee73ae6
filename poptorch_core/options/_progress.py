"""The compilation progress bar that ``Options`` hands to the backend.

The backend calls it with ``(progress, total)`` while it compiles; the bar
shows progress with tqdm and records how long the compilation took, which
``PoplarExecutor.compilationTime()`` reports.

Example::

    >>> bar = _CompilationProgressBar()
    >>> bar(0, 100); bar(100, 100)
    >>> isinstance(bar.compilation_time, datetime.timedelta)
    True
"""
import datetime
from typing import Any, Dict, Optional

__all__ = []


class _CompilationProgressBar:
    """Callable ``(progress, total)`` showing a tqdm bar.

    ``compilation_time`` is a ``datetime.timedelta`` once ``progress``
    reaches ``total`` (None before). The live tqdm object is not copied or
    pickled: copies start idle.
    """

    def __init__(self):
        self._bar = None
        self._start: Optional[datetime.datetime] = None
        self.compilation_time: Optional[datetime.timedelta] = None

    def __call__(self, progress: int, total: int) -> None:
        if self._bar is None:
            import tqdm  # heavy import, only needed when compiling
            self._start = datetime.datetime.now()
            self.compilation_time = None
            self._bar = tqdm.tqdm(desc="Graph compilation", total=total,
                                  bar_format="{l_bar}{bar}| {n_fmt}/"
                                  "{total_fmt} [{elapsed}<{remaining}]")
        self._bar.update(progress - self._bar.n)
        if progress >= total:
            self._bar.close()
            self._bar = None
            self.compilation_time = datetime.datetime.now() - self._start

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_bar": None}

    def __deepcopy__(self, memo: Dict[int, Any]) -> "_CompilationProgressBar":
        copied = _CompilationProgressBar()
        copied._start = self._start
        copied.compilation_time = self.compilation_time
        return copied

    def __repr__(self) -> str:
        return (f"_CompilationProgressBar(compilation_time="
                f"{self.compilation_time})")
