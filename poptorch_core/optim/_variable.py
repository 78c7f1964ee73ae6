"""Which optimizer attributes may change after the model is compiled."""
from typing import Iterable, List

__all__ = ["VariableAttributes"]


class VariableAttributes:
    """Tracks which optimizer attributes are variable (can be changed with
    ``setOptimizer`` after compilation) and which are constant (may be
    baked into the compiled program).

    A PopTorch optimizer marks every argument passed explicitly to its
    constructor as variable; the rest are constant. The simulator records
    const-ness in the optimizer description but compiles nothing into
    constants, so a changed constant still takes effect on ``setOptimizer``
    (on an IPU, PopART may reject it).

    Example::

        >>> model = torch.nn.Linear(4, 2)
        >>> opt = poptorch.optim.SGD(model.parameters(), lr=0.01)
        >>> opt.variable_attrs.isConstant("lr")
        False
        >>> opt.variable_attrs.isConstant("momentum")
        True
        >>> opt.variable_attrs.markAsVariable("momentum")
    """

    def __init__(self, variable_attributes: Iterable[str],
                 allowed_attributes: Iterable[str]) -> None:
        self._allowed_attributes: List[str] = list(allowed_attributes)
        self._variable_attributes = set()
        for attr in variable_attributes:
            self.markAsVariable(attr)

    def isConstant(self, attr: str) -> bool:
        """True unless ``attr`` was marked as variable."""
        return attr not in self._variable_attributes

    def markAsConstant(self, attr: str) -> None:
        """Lets ``attr`` be compiled into the program as a constant."""
        self._check(attr)
        self._variable_attributes.discard(attr)

    def markAsVariable(self, attr: str) -> None:
        """Lets ``attr`` change after compilation (through ``setOptimizer``)."""
        self._check(attr)
        self._variable_attributes.add(attr)

    def _check(self, attr: str) -> None:
        if attr not in self._allowed_attributes:
            raise AssertionError(
                f"Unknown attribute {attr}, allowed values: "
                f"{self._allowed_attributes}")

    def __repr__(self) -> str:
        return (f"VariableAttributes(variable={sorted(self._variable_attributes)}, "
                f"allowed={self._allowed_attributes})")
