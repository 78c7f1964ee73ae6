"""The compilation progress bar that ``Options`` hands to the backend.

The backend calls it with ``(progress, total)`` while it compiles; the bar
shows progress with tqdm and records how long the compilation took. The
executor drives it over each call that compiles
(``_executor/compile_progress.py``).

A compilation that ends within :data:`SHOW_AFTER_S` seconds prints nothing:
tracing a model takes under a second, and most compilations are just that
(all of them with the ``interpret`` backend); a bar on every model would be
noise. A longer one (the ``compile`` backend's first step, seconds with
nothing cached) shows its bar from then on, with the time since it
started.

Example::

    >>> bar = CompilationProgressBar()
    >>> bar(0, 100); bar(100, 100)
    >>> isinstance(bar.compilation_time, datetime.timedelta)
    True
"""
import datetime
import threading
from typing import Any, Dict, Optional

#: Seconds a compilation runs before its bar appears.
SHOW_AFTER_S = 2.0


class CompilationProgressBar:
    """Callable ``(progress, total)`` showing a tqdm bar.

    ``compilation_time`` is a ``datetime.timedelta`` once ``progress``
    reaches ``total`` (None before). :meth:`close` ends a compilation that
    failed, without a time. The live tqdm object is not copied or pickled:
    copies start idle.
    """

    def __init__(self):
        self._bar = None
        self._timer: Optional[threading.Timer] = None
        self._start: Optional[datetime.datetime] = None
        self.compilation_time: Optional[datetime.timedelta] = None

    def __call__(self, progress: int, total: int) -> None:
        if self._bar is None:
            import tqdm  # heavy import, only needed when compiling
            self._start = datetime.datetime.now()
            self.compilation_time = None
            self._bar = tqdm.tqdm(desc="Graph compilation", total=total,
                                  bar_format="{l_bar}{bar}| {n_fmt}/"
                                  "{total_fmt} [{elapsed}<{remaining}]",
                                  delay=SHOW_AFTER_S)
            if SHOW_AFTER_S > 0:
                # tqdm's delay only hides updates that come early; the
                # timer shows the bar at SHOW_AFTER_S even when no update
                # comes then.
                self._timer = threading.Timer(SHOW_AFTER_S,
                                              self._bar.refresh)
                self._timer.daemon = True
                self._timer.start()
        self._bar.update(progress - self._bar.n)
        if progress >= total:
            self.close()
            self.compilation_time = datetime.datetime.now() - self._start

    def close(self) -> None:
        """Closes the bar (a compilation that ended, or failed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_bar": None, "_timer": None}

    def __deepcopy__(self, memo: Dict[int, Any]) -> "CompilationProgressBar":
        copied = CompilationProgressBar()
        copied._start = self._start
        copied.compilation_time = self.compilation_time
        return copied

    def __repr__(self) -> str:
        return (f"CompilationProgressBar(compilation_time="
                f"{self.compilation_time})")
