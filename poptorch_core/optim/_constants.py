"""Constant optimizer attributes cannot change once a model is compiled.

PopART bakes the optimizer attributes that are constant into the program:
those a PopTorch optimizer marks constant (every attribute not passed to its
constructor, or ``variable_attrs.markAsConstant(name)``), and those of a
native torch optimizer left at their default values (``weight_decay=0``,
``momentum=0``, ...; ``lr`` is always variable). ``setOptimizer`` after
compilation may change variable attributes only; changing a constant one
(or making it variable) is an error, as on the IPU. A different optimizer
type is not compared: the simulator starts it with a fresh state. The
accumulation types are storage dtypes, described as variable: a new
optimizer's types apply.

Example::

    >>> old = {"type": "SGD2", "attributes": {}, "defaults": {},
    ...        "groups": [{"lr": (0.1, False), "momentum": (0.0, True)}]}
    >>> new = {"type": "SGD2", "attributes": {}, "defaults": {},
    ...        "groups": [{"lr": (0.2, False), "momentum": (0.0, True)}]}
    >>> check_constant_attributes(old, new)   # only lr changed: fine
"""
from typing import Any, Dict, Iterator, Tuple

from .._impl import cpp_error

_Description = Dict[str, Any]


def _attributes(description: _Description
                ) -> Iterator[Tuple[str, str, Tuple[Any, bool]]]:
    """(where, name, (value, is_constant)) for every attribute."""
    for name, entry in description.get("attributes", {}).items():
        yield "", name, entry
    for index, group in enumerate(description.get("groups", [])):
        for name, entry in group.items():
            yield f" of parameter group {index}", name, entry


def check_constant_attributes(compiled: _Description,
                              new: _Description) -> None:
    """Raises :class:`poptorch.Error` if ``new`` changes an attribute that
    is constant in the ``compiled`` optimizer (see the module docstring)."""
    if compiled.get("type") != new.get("type"):
        # A new optimizer type starts afresh on the device (its state is
        # reset), so the old type's constants do not apply to it.
        return
    current = {(where, name): entry for where, name, entry in
               _attributes(new)}
    for where, name, (value, constant) in _attributes(compiled):
        if (where, name) not in current or not constant:
            continue
        new_value, new_constant = current[(where, name)]
        if new_value != value or not new_constant:
            raise cpp_error(
                f"Cannot change the constant optimizer attribute {name}"
                f"{where} from {value!r} to {new_value!r}: constant "
                "attributes are compiled into the executable. Make it "
                "variable before compiling: pass it explicitly to a "
                "poptorch.optim optimizer or call "
                f"optimizer.variable_attrs.markAsVariable({name!r}) (a "
                "torch.optim optimizer's attribute is constant while it has "
                "its default value); or call destroy() and compile again.")
