"""Replica-grouped weights: one value of a weight per replica
group.

``executor.<param>.replicaGrouping(comm_group_type, shards, mode)`` splits
the ``R`` replicas into groups (the Ir's
:meth:`~poptorch_core.Ir.replica_grouping`):

- ``Consecutive``, ``shards = k``: ``{0..k-1}, {k..2k-1}, ...``;
- ``Orthogonal``, ``shards = k``: ``{0, R/k, 2R/k, ...}, {1, R/k + 1, ...}``;
- ``NoGrouping``: every replica alone (``shards`` ignored);
- ``All``: one group of all replicas.

Each group holds its own copy of the weight; the device keeps the copies
stacked, ``[groups, *shape]``, and replica ``r`` runs with copy
``assignment[r]``. Gradients flow into the copy each replica used, so they
are reduced within the group: summed with ``ReductionType.Sum``, averaged
over the group's ``G x k`` micro-batches with ``Mean``. The optimizer then
updates every copy with its own state (its rules are element-wise).

The host parameter carries a leading dimension with one slice per value
the host holds: one per group with ``VariableRetrievalMode.OnePerGroup``
(the first replica's), one per replica with ``AllReplicas``, and no
leading dimension when that count is 1 (as PopART's host shapes). The model
is traced with replica 0's copy: the first slice.

Example::

    >>> ir = poptorch.Ir(replication=4)
    >>> weight = GroupedWeight("w", _grouping(ir, CommGroupType.Orthogonal,
    ...                                       2), VariableRetrievalMode.OnePerGroup,
    ...                        torch.zeros(2, 3))
    >>> weight.assignment, weight.host_values
    ([0, 1, 0, 1], 2)
"""
from typing import Any, Dict, List, Sequence

import torch

from ..enums import CommGroupType, VariableRetrievalMode
from ..errors import createPoptorchError


def _grouping(ir: Any, comm_group_type: CommGroupType, shards: int) -> Any:
    """The Ir grouping of ``replicaGrouping(comm_group_type, shards)``."""
    replicas = ir.replication_factor
    if comm_group_type == CommGroupType.All:
        return ir.replica_grouping(1, replicas)
    if comm_group_type == CommGroupType.NoGrouping:
        return ir.replica_grouping(1, 1)
    if isinstance(shards, bool) or not isinstance(shards, int) or \
            shards < 1 or replicas % shards:
        raise createPoptorchError(
            f"replicaGrouping: the group size ({shards!r}) must be a "
            f"positive divisor of the replication factor ({replicas}).")
    if comm_group_type == CommGroupType.Orthogonal:
        return ir.replica_grouping(replicas // shards, shards)
    return ir.replica_grouping(1, shards)


class GroupedWeight:
    """One replica-grouped parameter: its groups and its host layout.

    Args:
        name: the parameter's name (for messages).
        grouping: the Ir ``ReplicaGrouping`` of its replicas.
        mode: what the host holds (``VariableRetrievalMode``).
        host: the host parameter.
    """

    def __init__(self, name: str, grouping: Any,
                 mode: VariableRetrievalMode, host: torch.Tensor):
        self.name = name
        self.assignment: List[int] = grouping.assignment
        self.num_groups: int = grouping.num_groups
        self.group_size: int = grouping.group_size
        self.first_replicas = [members[0] for members in grouping.groups]
        self.mode = mode
        self.host_values = self.num_groups \
            if mode == VariableRetrievalMode.OnePerGroup else \
            grouping.num_replicas
        if self.host_values > 1 and (host.dim() == 0 or
                                     host.shape[0] != self.host_values):
            raise createPoptorchError(
                f"replicaGrouping: parameter {name} has shape "
                f"{list(host.shape)}, but with {self.num_groups} group(s) "
                f"of {self.group_size} replica(s) and {mode.name} retrieval "
                f"the host holds {self.host_values} values: give it a "
                f"leading dimension of {self.host_values}, one slice per "
                "value.")

    def _per_group(self, host: torch.Tensor) -> torch.Tensor:
        """The host's values as ``[groups, *shape]``."""
        if self.host_values == 1:
            return host.unsqueeze(0).expand(self.num_groups, *host.shape)
        if self.mode == VariableRetrievalMode.OnePerGroup:
            return host
        for members in _groups_of(self.assignment, self.num_groups):
            for replica in members[1:]:
                if not torch.equal(host[replica], host[members[0]]):
                    raise createPoptorchError(
                        f"replicaGrouping: replicas {members[0]} and "
                        f"{replica} share one value of {self.name}, but its "
                        "host slices for them differ. Give every replica "
                        "of a group the same slice.")
        return host[self.first_replicas]

    def device_value(self, host: torch.Tensor) -> torch.Tensor:
        """A new device tensor holding one copy per group."""
        with torch.no_grad():
            return self._per_group(host.detach()).clone().contiguous()

    def to_device(self, device: torch.Tensor, host: torch.Tensor) -> None:
        with torch.no_grad():
            device.copy_(self._per_group(host.detach()))

    def to_host(self, device: torch.Tensor, host: torch.Tensor) -> None:
        with torch.no_grad():
            if self.host_values == 1:
                host.data.copy_(device[0])
            elif self.mode == VariableRetrievalMode.OnePerGroup:
                host.data.copy_(device)
            else:
                host.data.copy_(device[self.assignment])

    def select(self, device: torch.Tensor, replica: int) -> torch.Tensor:
        """The copy replica ``replica`` runs with (a view: its gradient
        flows into that copy)."""
        return device[self.assignment[replica]]


def _groups_of(assignment: Sequence[int], num_groups: int
               ) -> List[List[int]]:
    return [[r for r, g in enumerate(assignment) if g == group]
            for group in range(num_groups)]


def resolve(requested: Dict[str, Any], ir: Any,
            param_names: Sequence[Sequence[str]],
            host_params: Sequence[torch.Tensor]) -> Dict[int, GroupedWeight]:
    """Parameter index -> :class:`GroupedWeight` for every
    ``replicaGrouping`` request (name -> ``(CommGroupType, shards,
    VariableRetrievalMode)``), grouped by ``ir``'s replica groupings."""
    requested = dict(requested)
    grouped = {}
    for index, names in enumerate(param_names):
        name = next((n for n in names if n in requested), None)
        if name is None:
            continue
        comm_group_type, shards, mode = requested.pop(name)
        grouping = _grouping(ir, comm_group_type, shards)
        grouped[index] = GroupedWeight(name, grouping, mode,
                                       host_params[index])
    if requested:
        raise createPoptorchError(
            f"replicaGrouping() was called for {sorted(requested)}, which "
            "the model does not have as parameters.")
    return grouped


def check_optimizer(optimizer: Any, grouped: Dict[int, GroupedWeight]
                    ) -> None:
    """Refuses optimizers whose update is not element-wise: their norms
    would span the groups' copies."""
    if not grouped or optimizer is None:
        return
    from ..optim._resolve import resolve_optimizer
    resolved = resolve_optimizer(optimizer)
    if resolved.kind.family == "lamb" or \
            resolved.attributes.get("max_grad_norm", float("inf")) != \
            float("inf"):
        raise createPoptorchError(
            "Replica-grouped weights are simulated with SGD, Adam, AdamW and "
            "RMSprop without max_grad_norm: LAMB's trust ratio and gradient "
            "clipping take norms, which the simulator would compute over "
            "all groups' copies at once. Use another optimizer or remove "
            "replicaGrouping().")


def reduce_within_groups(params: Sequence[torch.Tensor],
                         grouped: Dict[int, GroupedWeight],
                         real_per_replica: Sequence[int]) -> None:
    """Turns the mean over all real micro-batches that the optimizer
    applies (``G x R`` when none holds padding only) into the mean over each
    group's real ones (``G x k``). ``real_per_replica[r]``: replica ``r``'s
    real micro-batches. A group without one has no gradient to scale (its
    copy still takes the step, with a zero gradient)."""
    total = sum(real_per_replica)
    for index, weight in grouped.items():
        grad = params[index].grad
        if grad is None or total == 0:
            continue
        for group, members in enumerate(_groups_of(weight.assignment,
                                                   weight.num_groups)):
            real = sum(real_per_replica[r] for r in members)
            if real and real != total:
                grad[group].mul_(total / real)
