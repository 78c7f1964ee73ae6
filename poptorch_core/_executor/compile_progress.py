"""The compilation progress bar over the calls that compile, and the time
``compilationTime()`` reports.

PopTorch shows one "Graph compilation" bar while a model compiles, and
``compilationTime()`` says how long that took. Here a model compiles in up
to two parts:

* tracing (``build_program``: capture, the IPU rule checks, the device
  model's estimate), in ``compile()`` or the first call;
* with the ``compile`` backend, inductor's compilation of the traced graph
  for the first run's tensors (``backends.executable``), in ``compile()``
  (``Program.prepare``) or the first call: seconds, less once inductor's
  on-disk cache holds the model.

A call that compiles shows one bar for what it compiles (options'
``_progress_bar``, which appears only once a compilation has run for two
seconds): 30% once tracing is done when the backend still compiles in the
same call, 70% once inductor has generated its code (its C++ build may
still be running), 100% when the call is done. ``compilationTime()`` is
the tracing time plus the backend's compilation time (which ends when the
C++ build is loaded).

Invariants: a bar is open only during a call; a call that fails closes it
without a time; ``showCompilationProgressBar(False)`` shows none, and the
times are kept either way.

Example (tracing takes under two seconds here: no bar)::

    >>> model = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    >>> _ = model(torch.ones(1, 2))
    >>> model.compilationTime().total_seconds() > 0
    True
"""
import datetime
import types
from typing import Optional, Type

from .state import ExecutorState

#: Percent of the bar once tracing is done and once inductor has generated
#: its code.
TRACED, GENERATED, DONE = 30, 70, 100


def _backend_compiles(state: ExecutorState) -> bool:
    """Whether the next run compiles in the backend (the ``compile``
    backend's first run). Asked on every call: a compiled model answers
    from its executable, without reading the options."""
    program = state.program
    if program is None:
        return state.options.Simulator.execution_backend == "compile"
    executable = program.executable
    return executable.backend == "compile" and not executable.compilations


class CompilationProgress:
    """The progress of one executor call that may compile: ``tracing``
    when it traces the model, and, unless ``backend`` is False, whether
    the backend compiles in it, which it reads from ``state``."""

    def __init__(self, state: ExecutorState, tracing: bool,
                 backend: bool = True):
        self._state = state
        self._backend = backend and _backend_compiles(state)
        #: Whether this call compiles; the rest is for those that do.
        self.compiles = tracing or self._backend
        #: Whether the bar is open (shown or not).
        self._open = self.compiles
        self._seconds_before = 0.0

    def _show(self, percent: int) -> None:
        options = self._state.options
        if self._open and options.show_compilation_progress_bar:
            options._progress_bar(percent, DONE)
        self._open = self._open and percent < DONE

    def __enter__(self) -> "CompilationProgress":
        self._show(0)
        program = self._state.program
        if self.compiles and program is not None:
            self._watch(program)
        return self

    def _watch(self, program) -> None:
        executable = program.executable
        self._seconds_before = executable.compile_seconds
        if self._backend:
            executable.on_compiled = lambda: self._show(GENERATED)

    def traced(self) -> None:
        """Tracing is done (``state.program`` is set)."""
        self._show(TRACED if self._backend else DONE)
        self._watch(self._state.program)

    def __exit__(self, kind: Optional[Type[BaseException]],
                 error: Optional[BaseException],
                 trace: Optional[types.TracebackType]) -> None:
        if not self.compiles:
            return
        program = self._state.program
        if program is not None:
            program.executable.on_compiled = None
            compiled = (program.executable.compile_seconds -
                        self._seconds_before)
            if compiled and self._state.compilation_time is not None:
                self._state.compilation_time += datetime.timedelta(
                    seconds=compiled)
        if kind is None:
            self._show(DONE)
        elif self._open:
            self._state.options._progress_bar.close()
            self._open = False
