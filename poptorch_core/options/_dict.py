"""Mechanics shared by every node of the ``poptorch.Options`` tree.

:class:`OptionsDict` stores typed option values (reading ``opts.name``
returns the value, assigning ``opts.name = v`` type-checks it) and can be
frozen; :class:`_PopartOptions` is the free-form dictionary of backend
options. Both copy into *unfrozen* objects, so ``copy.deepcopy(frozen)`` is
always editable.

Example::

    >>> d = OptionsDict(device_iterations=1)
    >>> d.device_iterations = 4
    >>> d.toDict()
    {'device_iterations': 4}
    >>> d._freeze()
    >>> d.set(device_iterations=2)
    Traceback (most recent call last):
    ...
    AttributeError: Can't modify frozen Options
"""
import contextlib
import copy
from typing import Any, Dict, Iterator, Optional

from .._logging import logger
from ..errors import public_class
from ._backend_keys import check_backend_option

_FROZEN_MSG = "Can't modify frozen Options"

# Value types PopART accepts for a session/engine option; anything else
# could never be lowered, so it is refused when set rather than at compile.


class _Freezable:
    """Freezing and unfrozen deep copies, shared by the whole option tree.

    Children (attributes that are themselves ``_Freezable``) follow their
    parent's freeze state.
    """
    _is_frozen: bool

    def checkIsFrozen(self, option: Optional[str] = None) -> None:
        """Raises ``AttributeError`` if these options are frozen (changing
        ``_is_frozen`` itself is always allowed)."""
        if option != "_is_frozen" and self.__dict__.get("_is_frozen", False):
            raise AttributeError(_FROZEN_MSG)

    def _changeFreezeState(self, frozen: bool) -> None:
        object.__setattr__(self, "_is_frozen", frozen)
        for value in self.__dict__.values():
            if isinstance(value, _Freezable):
                value._changeFreezeState(frozen)

    def _freeze(self) -> None:
        self._changeFreezeState(True)

    def _unfreeze(self) -> None:
        self._changeFreezeState(False)

    @property
    def frozen(self) -> bool:
        """Whether these options are read-only (they are once a model is
        wrapped with them)."""
        return self.__dict__.get("_is_frozen", False)

    def freeze(self) -> None:
        """Makes these options and their sub-namespaces read-only."""
        self._freeze()

    @contextlib.contextmanager
    def thawed(self) -> Iterator[None]:
        """Lets the body change frozen options (for a setting the simulator
        itself must adjust, such as the reduction strategy a float16
        optimizer state needs), then restores the frozen state."""
        was_frozen = self.frozen
        self._unfreeze()
        try:
            yield
        finally:
            if was_frozen:
                self._freeze()

    def __deepcopy__(self, memo: Dict[int, Any]) -> "_Freezable":
        cls = type(self)
        copied = cls.__new__(cls)
        # Registered before copying the children so that shared references
        # (Training and Precision both point at the Options' _Popart) stay
        # shared in the copy.
        memo[id(self)] = copied
        for key, value in self.__dict__.items():
            # Children copy themselves through this method: unfrozen too.
            value = False if key == "_is_frozen" else copy.deepcopy(
                value, memo)
            object.__setattr__(copied, key, value)
        return copied

    def __getstate__(self) -> Dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)


def _type_matches(value: Any, default: Any) -> bool:
    # bool is an int subclass, but True is never a sensible iteration count:
    # refuse it rather than store 1 where an int is expected.
    if isinstance(value, bool) and not isinstance(default, bool):
        return False
    return isinstance(value, type(default))


@public_class
class OptionsDict(_Freezable):
    """A typed dictionary of options with attribute access.

    The constructor's keyword arguments are the valid options and their
    defaults; a value must later have the type of its default.
    Subclasses add named setters (which return ``self`` so that calls
    chain) and may validate values in :meth:`_checkValue`.

    Example::

        >>> d = OptionsDict(gradient_accumulation=1)
        >>> d.set(gradient_accumulation=4).gradient_accumulation
        4
        >>> d.set(gradient_accumulation="4")
        Traceback (most recent call last):
        ...
        AssertionError: Unexpected type <class 'str'> for option \
gradient_accumulation. Expected <class 'int'>
    """

    def __init__(self, **default_values: Any):
        # Private attributes may only be created before _values exists.
        self._is_frozen = False
        self._values = default_values

    def _checkValue(self, option: str, value: Any) -> None:
        """Hook for subclasses: raise if ``value`` is invalid for
        ``option`` (its type has already been checked)."""

    def set(self, **kwargs: Any) -> "OptionsDict":
        """Sets existing options; each value must have its default's type."""
        self.checkIsFrozen()
        for option, value in kwargs.items():
            if not self.exists(option):
                raise AssertionError(
                    "Invalid option %s, valid options are %s" %
                    (option, list(self._values.keys())))
            default = self._values[option]
            if not _type_matches(value, default):
                raise AssertionError(
                    "Unexpected type %s for option %s. Expected %s" %
                    (type(value), option, type(default)))
            self._checkValue(option, value)
            self._values[option] = value
        return self

    def createOrSet(self, **kwargs: Any) -> "OptionsDict":
        """Like :meth:`set`, but creates the options that do not exist."""
        self.checkIsFrozen()
        for option, value in kwargs.items():
            if self.exists(option):
                self.set(**{option: value})
            else:
                self._checkValue(option, value)
                self._values[option] = value
        return self

    def exists(self, option: str) -> bool:
        """True if ``option`` is currently set."""
        return option in self._values

    def deleteIfExists(self, option: str) -> "OptionsDict":
        """Removes ``option`` if it is set (used for optional options)."""
        self.checkIsFrozen()
        self._values.pop(option, None)
        return self

    def _serialised(self) -> Dict[str, Any]:
        """The entries :meth:`update` merges (subclasses may rename keys)."""
        return self._values

    def update(self, other: Dict[str, Any]) -> Dict[str, Any]:
        """Merges these values into ``other`` (keys must not overlap) and
        returns it."""
        mine = self._serialised()
        common = set(mine).intersection(other)
        if common:
            raise AssertionError(
                "Can't merge dictionaries, they have some keys "
                "in common: %s" % sorted(common))
        other.update(mine)
        return other

    def toDict(self) -> Dict[str, Any]:
        """A new plain dict of the values."""
        return self.update({})

    def __call__(self, option: str) -> Any:
        return getattr(self, option)

    def __setattr__(self, option: str, value: Any) -> None:
        self.checkIsFrozen(option)
        if option.startswith("_"):
            if "_values" in self.__dict__ and option not in self.__dict__:
                raise AttributeError("Invalid private attribute " + option)
            object.__setattr__(self, option, value)
            return
        if isinstance(getattr(type(self), option, None), property):
            raise AttributeError(
                f"{option} is read-only: use its setter methods instead")
        self.set(**{option: value})

    def __getattr__(self, option: str) -> Any:
        # Only reached when normal lookup fails. Objects being unpickled or
        # deep-copied have no _values yet: never recurse into it.
        values = self.__dict__.get("_values")
        if values is None or option not in values:
            raise AttributeError("Invalid attribute %s." % option)
        return values[option]

    def _privateRepr(self) -> Dict[str, Any]:
        return {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("_values", "_is_frozen")
            and not isinstance(v, _Freezable)
        }

    def __repr__(self) -> str:
        items = {**self._values, **self._privateRepr()}
        body = ", ".join(f"{k}={v!r}" for k, v in items.items())
        return f"{type(self).__name__}({body})"


@public_class
class _PopartOptions(_Freezable):
    """Backend (PopART) session options: any string key is accepted.

    PopTorch validates these in its C++ backend; the simulator stores them,
    checks here only that the key is a string, checks the value types when
    a model is compiled (``options._validation``), and otherwise ignores
    them.

    Example::

        >>> p = _PopartOptions()
        >>> p.set("enableStableNorm", True).options["enableStableNorm"]
        True
    """

    def __init__(self):
        self._is_frozen = False
        self.options: Dict[str, Any] = {}
        self.set("instrumentWithHardwareCycleCounter", False)
        self.set("rearrangeAnchorsOnHost", False)

    def __setattr__(self, name: str, value: Any) -> None:
        self.checkIsFrozen(name)
        object.__setattr__(self, name, value)

    def set(self, key: str, value: Any) -> "_PopartOptions":
        """Sets the backend option ``key`` to ``value``."""
        self.checkIsFrozen()
        if not isinstance(key, str):
            raise TypeError(
                f"Backend option names must be strings, not {type(key)}")
        if key == "logDir":
            logger.warning(
                "Ignoring call to poptorch.Options._Popart.set('logDir', ...)"
                ": use poptorch.Options.logDir() instead")
            return self
        check_backend_option(key, value)
        self.options[key] = value
        return self

    def setEngineOptions(self, options: Dict[str, Any]) -> "_PopartOptions":
        """Sets the Poplar engine options (a dict of strings)."""
        if not isinstance(options, dict):
            raise AssertionError(
                "Options must be a dictionary, not %s" % type(options))
        return self.set("engineOptions", options)

    def setPatterns(self, patterns: Dict[str, bool],
                    level: int = 2) -> "_PopartOptions":
        """Enables or disables PopART patterns on top of pattern ``level``."""
        if not isinstance(level, int):
            raise AssertionError("level must be an integer")
        if not isinstance(patterns, dict):
            raise AssertionError("patterns must be a dictionary")
        self.set("patterns", patterns)
        return self.set("patternsLevel", level)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"_PopartOptions({body})"
