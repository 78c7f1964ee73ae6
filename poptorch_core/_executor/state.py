"""The state of one wrapped model, in one object.

``PoplarExecutor`` is the user-facing facade; what it knows lives here, and
the modules that compile, sync weights, read anchors, save and link the
optimizer receive this object explicitly.

Invariants:

- ``program`` is None until the model is compiled, and ``attached`` implies
  a program.
- ``host_weights_stale`` is True only for a training model, between a call
  (which updates the device weights) and the next device-to-host copy.
- The user model never shares storage with the device: weights move only
  through :meth:`copy_weights_to_host` and ``Program.state``.
"""
import contextlib
import datetime
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch

from .._logging import logger
from ..errors import NO_EXECUTABLE_ERR, createPoptorchError
from .._ir import Ir
from ..options import Options
from . import host_sync
from .micro_batches import BatchLayout
from .optimizer_link import OptimizerLink
from .program import Program


class ExecutorState:
    """What one ``trainingModel``/``inferenceModel`` wrapper holds.

    Args:
        model: the (shallow) copy of the user model that is traced.
        user_model: the user's model, whose host weights are synced.
        options: the wrapper's own (cloned, frozen) options.
        training: whether this is a training model.
    """

    def __init__(self, model: torch.nn.Module, user_model: torch.nn.Module,
                 options: Options, training: bool):
        self.model = model
        self.user_model = user_model
        self.options = options
        self.training = training
        self.program: Optional[Program] = None
        self.attached = False
        self.host_weights_stale = False
        self.optimizer_link: Optional[OptimizerLink] = None
        self.ir = Ir()
        #: Parameter name -> (CommGroupType, shards, VariableRetrievalMode),
        #: set by ``replicaGrouping`` before compilation.
        self.per_replica_params: Dict[str, Any] = {}
        #: The RNG state to restore on the next attach.
        self.cached_rng_state: Optional[List[int]] = None
        #: Anchored tensors read after the last call, by short name.
        self.anchor_memory: Dict[str, torch.Tensor] = {}
        self.compilation_time: Optional[datetime.timedelta] = None
        #: The user model's weights version this inference model follows.
        self.followed_weights_version: Optional[int] = None
        #: Whether the wrapper warned that its mode and the model's differ.
        self.mode_warned = False
        #: How implicit device-to-host copies are made (the facade points
        #: it at its ``copyWeightsToHost``).
        self.copy_to_host: Callable[[], None] = self.copy_weights_to_host
        #: Serialises calls and weight copies, shared by every wrapper of
        #: the user model (``host_sync.model_lock``): wrappers used from
        #: several threads run one call at a time, and a thread that reads
        #: the host weights waits for the call in flight instead of copying
        #: half an optimizer step.
        self.lock = host_sync.model_lock(user_model)

    @property
    def compiled(self) -> bool:
        return self.program is not None

    def layout(self) -> BatchLayout:
        """How one call's inputs split into micro-batches."""
        opts = self.options
        return BatchLayout(opts.device_iterations,
                           opts.Training.gradient_accumulation,
                           opts.replication_factor, opts.input_group_size,
                           opts.input_cgt)

    def require_program(self) -> Program:
        if self.program is None:
            raise createPoptorchError(NO_EXECUTABLE_ERR)
        return self.program

    @contextlib.contextmanager
    def serialised(self) -> Iterator[None]:
        """Holds :attr:`lock` and, for an inference model that follows a
        model trained through a wrapper holding it, that model's lock too:
        the call then sees the weights of whole training steps. Locks are
        always taken in that order (the inference model's, then its
        owner's), and a training call takes only its own, so no two
        threads wait for each other."""
        with self.lock:
            owner = None if self.training else \
                host_sync.owner_lock(self.user_model)
            if owner is None or owner is self.lock:
                yield
                return
            with owner:
                yield

    # --- Weights ------------------------------------------------------------
    def copy_weights_to_host(self) -> None:
        """Device -> host copy of the weights and buffers."""
        program = self.require_program()
        # Cleared first: the copy reads the host tensors, which would sync
        # (copy) again. Set back if the copy stops part-way (a signal
        # handler's exception, say), so that the next read copies it all.
        self.host_weights_stale = False
        try:
            program.state.copy_to_host()
        except BaseException:
            self.host_weights_stale = self.training
            raise
        host_sync.bump_weights_version(self.user_model)

    def copy_weights_to_host_if_needed(self) -> bool:
        """Copies the weights to the host if a training call made the host
        copy stale; returns whether it copied. The copy goes through
        :attr:`copy_to_host`, the facade's ``copyWeightsToHost`` (as in
        PopTorch, where a subclass or a patched method sees implicit
        copies too)."""
        with self.lock:
            if not self.host_weights_stale:
                return False
            logger.debug("Implicit copyWeightsToHost()")
            self.copy_to_host()
            return True

    def copy_weights_to_device(self) -> None:
        """Host -> device copy of the weights and buffers (the optimizer
        state is read back first, so that it is not lost)."""
        program = self.require_program()
        if self.optimizer_link is not None:
            self.optimizer_link.sync_state_to_host()
        program.state.copy_to_device()

    def sync_to_host(self) -> None:
        """Makes the host model and optimizer current (before the device
        copy goes away: detach, destroy)."""
        if self.training and self.compiled:
            self.copy_weights_to_host_if_needed()
            self.optimizer_link.sync_state_to_host()
