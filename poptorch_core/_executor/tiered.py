"""The ``auto`` backend: ``interpret`` first, ``compile`` once it is built.

A model wrapped with ``Simulator.backend("auto")`` (the default) runs its
first calls with the ``interpret`` backend, which starts at once, while the
``compile`` backend's form of its step is built in the background; at the
first call boundary after the build is done, the program switches to it
(:meth:`TieredBackend.before_call`). So the first step costs what
``interpret``'s costs and the steady state what ``compile``'s costs.

What the switch keeps and changes:

* It happens only between two calls, never inside one: the weights,
  buffers, optimizer state and the device's RNG stream are the same
  tensors before and after it, so they continue bit for bit. What changes
  is how later steps compute: the compiled graph, and the packed Adam
  update run as torch's fused kernel (the optimizer's groups are repacked,
  by copying, at the next step), equal to ``interpret``'s results within
  float rounding as the ``compile`` backend's are.
* Until it, results are exactly ``interpret``'s.
* A build that fails logs one warning naming the error, and the model
  stays on ``interpret``. A step that would need another compiled form
  than the one built (``setOptimizer`` changed the update, say) starts a
  new build instead of switching.
* A run over several processes (``Options.Distributed``) stays on
  ``interpret``: the processes would switch at different steps, and their
  replicas would then update with different arithmetic.

When: the build starts at the model's second call (a model called once
compiles nothing), or at ``model.compile()``. Builds run one at a time, in
the order they were asked for, in one background thread
(:mod:`._background_compile`); a model's first call never competes with
its own build.

Example (``"auto"`` is the default unless ``POPTORCH_SIM_BACKEND`` says
otherwise)::

    >>> opts = poptorch.Options()
    >>> _ = opts.Simulator.backend("auto")
    >>> model = poptorch.inferenceModel(torch.nn.Linear(2, 1), opts)
    >>> _ = model(torch.ones(4, 2))   # interpret; a second call starts the
    >>> model.compilations()          # build
    0
"""
import copy
import time
from typing import Any, Optional

from .._logging import logger
from .arguments import BoundArgs
from .background_compile import Build, submit
from .backends import Executable


class TieredBackend:
    """The ``auto`` backend of one program (``Program.tiers``): whether
    its compiled step is building, built, switched to or given up."""

    def __init__(self, host_device: str, enabled: bool = True):
        self._host_device = host_device
        #: False where the program stays on ``interpret`` (several
        #: processes).
        self._enabled = enabled
        self._build: Optional[Build] = None
        #: Calls the program has started.
        self.calls = 0
        #: How many calls ran on ``interpret`` before the switch (None
        #: before it).
        self.interpreted_calls: Optional[int] = None
        #: Seconds from the start of the build that was switched to until
        #: the switch.
        self.seconds_to_switch: Optional[float] = None
        self._given_up = False

    @property
    def switched(self) -> bool:
        """Whether the program runs its compiled step."""
        return self.interpreted_calls is not None

    def before_call(self, program: Any, bound: BoundArgs) -> None:
        """A call boundary: starts the build at the second call (unless
        ``compile()`` started it), switches once the build is done."""
        if self.calls >= 1 or self._build is not None:
            self.switch_if_ready(program, bound)
        self.calls += 1

    def switch_if_ready(self, program: Any, bound: BoundArgs) -> bool:
        """Switches ``program`` to its compiled step if the build is done
        and has the form a step of ``bound`` runs; starts a build if none
        is under way. Returns whether the program runs compiled."""
        if self.switched or self._given_up or not self._enabled:
            return self.switched
        build = self._build
        if build is None or not build.done():
            self.start(program, bound)
            return False
        if build.error is not None:
            self._given_up = True
            logger.warning(
                "Simulator backend 'auto': compiling the model in the "
                "background failed (%s: %s); it stays on the interpret "
                "backend. Simulator.backend('compile') raises the full "
                "error.", type(build.error).__name__, build.error)
            return False
        if not build.executable.has_form(
                program.step_form(bound, build.executable)):
            logger.debug("Simulator backend 'auto': this step needs another "
                         "compiled form than the one built; building it")
            self._build = None
            self.start(program, bound)
            return False
        self._switch(program, build)
        return True

    def start(self, program: Any, bound: BoundArgs) -> None:
        """Starts building the compiled step for ``bound``'s micro-batches
        (no-op when a build is under way or done)."""
        if self._build is not None or not self._enabled or self.switched:
            return
        # A copy of the graph: inductor's cache lookup swaps the module's
        # ``meta`` out while it hashes it, which the calls running
        # meanwhile read (the captured graph is the host graph when
        # lowering changes nothing).
        executable = Executable(
            copy.deepcopy(program.executable.graph_module), "compile")
        # Example tensors: the build must not read the step's own, which
        # the calls running meanwhile update.
        form = program.step_form(bound, executable).like()
        self._build = submit(executable, form, self._host_device)

    def _switch(self, program: Any, build: Build) -> None:
        program.executable = build.executable
        if program.training:
            program.device_optimizer.fused_update = True
        self.interpreted_calls = self.calls
        self.seconds_to_switch = time.perf_counter() - build.submitted
        logger.info("Simulator backend 'auto': switched to the compiled step "
                    "after %d calls, %.1f s after its build started",
                    self.calls, self.seconds_to_switch)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the build under way (for tests and benchmarks);
        returns whether none is left running."""
        return self._build is None or self._build.wait(timeout)

    def cancel(self) -> None:
        """The program is dropped: a build that has not started is
        skipped."""
        if self._build is not None:
            self._build.cancel()
