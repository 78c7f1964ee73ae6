"""PopXL-style replica groupings: which replicas share a variable or take
part in the same collective.

A *constant-stride* grouping is described by ``(stride, group_size)``: the
group that holds replica ``r0`` is ``{r0, r0 + stride, ...}`` with
``group_size`` members. Replicas are laid out in blocks of
``stride * group_size``; inside block ``b`` replica ``r`` belongs to group
``b * stride + r % stride``. A grouping built from an explicit assignment
may have no constant stride: it is fine for variable settings (one value per
group) but cannot drive a collective.

Example::

    >>> ir = poptorch.Ir(replication=8)
    >>> ir.replica_grouping(stride=2, group_size=4).assignment
    [0, 1, 0, 1, 0, 1, 0, 1]
"""
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ..enums import CommGroupType, VariableRetrievalMode

__all__ = ["ReplicaGrouping", "CommGroup", "VariableSettings"]


class CommGroup(NamedTuple):
    """A collective's replica groups as PopTorch's ``CommGroupType`` names
    them (``replica_group_size`` replicas per group)."""
    type: CommGroupType
    replica_group_size: int


class VariableSettings(NamedTuple):
    """How a replica-grouped variable is stored: ``assignment[r]`` is the
    index of the value that replica ``r`` uses."""
    assignment: Tuple[int, ...]
    num_groups: int
    retrieval_mode: VariableRetrievalMode


def _const_assignment(num_replicas: int, stride: int,
                      group_size: int) -> List[int]:
    block = stride * group_size
    return [(r // block) * stride + r % stride for r in range(num_replicas)]


def _relabel_by_first_appearance(assignment: Sequence[int]) -> List[int]:
    # Two assignments describe the same partition iff they agree once groups
    # are numbered in the order their first replica appears.
    labels = {}
    return [labels.setdefault(g, len(labels)) for g in assignment]


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}.")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}.")
    return value


class ReplicaGrouping:
    """A partition of an Ir's replicas into equally sized groups.

    Build one with :meth:`Ir.replica_grouping` or
    :meth:`Ir.replica_grouping_from_assignments`; the constructor is not
    public (as in PopXL).

    Example::

        >>> ir = poptorch.Ir(replication=8)
        >>> rg = ir.replica_grouping(stride=1, group_size=2)
        >>> rg.assignment, rg.num_groups
        ([0, 0, 1, 1, 2, 2, 3, 3], 4)
        >>> rg.transpose().assignment
        [0, 1, 0, 1, 0, 1, 0, 1]
    """

    def __init__(self, *args, **kwargs):
        del args, kwargs
        raise RuntimeError(
            "Cannot create a ReplicaGrouping directly: use "
            "ir.replica_grouping(stride, group_size) or "
            "ir.replica_grouping_from_assignments(assignment).")

    @classmethod
    def _new(cls, num_replicas: int, assignment: Sequence[int],
             stride: Optional[int]) -> "ReplicaGrouping":
        self = object.__new__(cls)
        self._num_replicas = num_replicas
        self._assignment = tuple(assignment)
        self._stride = stride
        self._group_size = num_replicas // len(set(self._assignment))
        return self

    @classmethod
    def _from_params(cls, num_replicas: int, stride: int = 1,
                     group_size: Optional[int] = None) -> "ReplicaGrouping":
        stride = check_positive_int("stride", stride)
        if group_size is None:
            if num_replicas % stride != 0:
                raise ValueError(
                    f"The stride ({stride}) must divide the replication "
                    f"factor ({num_replicas}) when group_size is not given.")
            group_size = num_replicas // stride
        group_size = check_positive_int("group_size", group_size)
        if num_replicas % (stride * group_size) != 0:
            raise ValueError(
                f"stride * group_size ({stride} * {group_size}) must divide "
                f"the replication factor ({num_replicas}).")
        if group_size == 1:
            stride = 1  # every replica is alone: the stride means nothing
        return cls._new(num_replicas,
                        _const_assignment(num_replicas, stride, group_size),
                        stride)

    @classmethod
    def _from_assignments(cls, num_replicas: int,
                          assignment: Sequence[int]) -> "ReplicaGrouping":
        if not isinstance(assignment, (list, tuple)) or any(
                isinstance(g, bool) or not isinstance(g, int)
                for g in assignment):
            raise TypeError(
                "assignment must be a list of ints: the group index of each "
                f"replica, got {assignment!r}.")
        if len(assignment) != num_replicas:
            raise ValueError(
                f"assignment has {len(assignment)} entries but the "
                f"replication factor is {num_replicas}: give one group index "
                "per replica.")
        num_groups = len(set(assignment))
        if sorted(set(assignment)) != list(range(num_groups)):
            raise ValueError(
                "Group indices in assignment must be 0..num_groups-1 with "
                f"none missing, got {list(assignment)}.")
        sizes = {assignment.count(g) for g in range(num_groups)}
        if len(sizes) != 1:
            raise ValueError(
                "All groups of a replica grouping must have the same size, "
                f"got group sizes {sorted(sizes)} for {list(assignment)}.")
        return cls._new(num_replicas, assignment,
                        cls._find_stride(num_replicas, assignment))

    @staticmethod
    def _find_stride(num_replicas: int,
                     assignment: Sequence[int]) -> Optional[int]:
        """The constant stride describing ``assignment``, or None."""
        members = [r for r, g in enumerate(assignment) if g == assignment[0]]
        group_size = len(members)
        stride = members[1] - members[0] if group_size > 1 else 1
        if num_replicas % (stride * group_size) != 0:
            return None
        const = _const_assignment(num_replicas, stride, group_size)
        if const != _relabel_by_first_appearance(assignment):
            return None
        return stride

    @property
    def num_replicas(self) -> int:
        """The replication factor this grouping partitions."""
        return self._num_replicas

    @property
    def assignment(self) -> List[int]:
        """``assignment[r]`` is the index of the group of replica ``r``."""
        return list(self._assignment)

    @property
    def group_size(self) -> int:
        """Number of replicas in each group."""
        return self._group_size

    @property
    def num_groups(self) -> int:
        """Number of groups."""
        return self._num_replicas // self._group_size

    @property
    def is_const(self) -> bool:
        """True when the grouping has a constant stride."""
        return self._stride is not None

    @property
    def stride(self) -> int:
        """Distance between consecutive replicas of a group.

        Raises ValueError for a grouping without a constant stride.
        """
        if self._stride is None:
            raise ValueError(
                f"{self!r} has no constant stride: it was built from an "
                "assignment that no (stride, group_size) pair describes.")
        return self._stride

    @property
    def const_rg(self) -> "ReplicaGrouping":
        """The equivalent grouping built from ``(stride, group_size)``.

        Raises ValueError when the grouping has no constant stride.
        """
        return ReplicaGrouping._from_params(self._num_replicas, self.stride,
                                            self._group_size)

    @property
    def groups(self) -> List[List[int]]:
        """The replicas of each group, in group-index order."""
        return [[r for r, g in enumerate(self._assignment) if g == group]
                for group in range(self.num_groups)]

    def transpose(self) -> "ReplicaGrouping":
        """The grouping whose ``i``-th group takes the ``i``-th replica of
        every group of this one (the groups of a collective that crosses
        this grouping's groups)."""
        rank_in_group = []
        seen = {}
        for g in self._assignment:
            rank_in_group.append(seen.get(g, 0))
            seen[g] = rank_in_group[-1] + 1
        return ReplicaGrouping._from_assignments(self._num_replicas,
                                                 rank_in_group)

    def _to_comm_group(self) -> CommGroup:
        """The collective groups as a :class:`CommGroup`.

        Raises ValueError for groupings that a collective cannot use.
        """
        if not self.is_const:
            raise ValueError(
                f"{self!r} has no constant stride: such groupings can set up "
                "replica-grouped variables but not collectives. Use "
                "ir.replica_grouping(stride, group_size) instead.")
        size, r = self._group_size, self._num_replicas
        if size == r:
            return CommGroup(CommGroupType.All, r)
        if size == 1:
            return CommGroup(CommGroupType.NoGrouping, 1)
        if self._stride == 1:
            return CommGroup(CommGroupType.Consecutive, size)
        if self._stride * size == r:
            return CommGroup(CommGroupType.Orthogonal, size)
        raise ValueError(
            f"{self!r} is neither consecutive nor orthogonal, so no "
            "CommGroupType describes it.")

    def _to_variable_settings(
            self,
            retrieval_mode: VariableRetrievalMode = VariableRetrievalMode.
        OnePerGroup) -> VariableSettings:
        """Settings of a variable holding one value per group (any
        grouping, constant stride or not, is accepted)."""
        if not isinstance(retrieval_mode, VariableRetrievalMode):
            raise TypeError("retrieval_mode must be a VariableRetrievalMode, "
                            f"not {type(retrieval_mode).__name__}.")
        return VariableSettings(self._assignment, self.num_groups,
                                retrieval_mode)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicaGrouping):
            return NotImplemented
        return (self._num_replicas == other._num_replicas
                and _relabel_by_first_appearance(self._assignment)
                == _relabel_by_first_appearance(other._assignment))

    def __hash__(self) -> int:
        return hash((self._num_replicas,
                     tuple(_relabel_by_first_appearance(self._assignment))))

    def __repr__(self) -> str:
        if self.is_const:
            return (f"ReplicaGrouping(num_replicas={self._num_replicas}, "
                    f"stride={self._stride}, group_size={self._group_size})")
        return (f"ReplicaGrouping(num_replicas={self._num_replicas}, "
                f"assignment={list(self._assignment)})")
