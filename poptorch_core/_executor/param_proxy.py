"""The parameter proxy returned by ``executor.<param>``."""
from typing import Any

import torch

from ..enums import CommGroupType, VariableRetrievalMode
from ..errors import createPoptorchError
from .state import ExecutorState


class ParameterProxy:
    """Forwards everything to a model parameter and adds
    :meth:`replicaGrouping`."""

    def __init__(self, state: ExecutorState, name: str,
                 param: torch.nn.Parameter):
        object.__setattr__(self, "_state", state)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_param", param)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._param, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._param, name, value)

    def __repr__(self) -> str:
        return repr(self._param)

    def replicaGrouping(self, comm_group_type: CommGroupType, shards: int,
                        variable_retrieval_mode: VariableRetrievalMode) -> None:
        """Gives each replica group its own value of this parameter.

        The host parameter carries a leading dimension with one slice per
        group. Must be called before the model is compiled.
        """
        if self._param.dim() == 0:
            raise createPoptorchError(
                "Scalars cannot be passed as per-replica weight tensor values")
        if self._state.compiled:
            raise createPoptorchError(
                "replicaGrouping() must be called before the model is "
                "compiled: call destroy() first, or set it on a new wrapper.")
        self._state.per_replica_params[self._name] = (
            CommGroupType(comm_group_type), shards,
            VariableRetrievalMode(variable_retrieval_mode))
