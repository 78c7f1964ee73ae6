"""Lazy device-to-host weight sync for models wrapped by ``trainingModel``.

After a training call the host weights are stale. Instead of copying them
back after every call, the wrapper instruments the user's model in place:
the model's class becomes ``Poptorch<Class>``, each parameter's
class a ``Parameter`` subclass and each buffer's class a ``Tensor``
subclass. Reading the weights through any of them (``model.parameters()``,
``state_dict()``, ``model(x)``, ``model.fc.weight``, ``w.data``,
``torch.equal(w, ...)``, ``str(w)``) first calls
``model.copyWeightsToHostIfNeeded()``, which copies exactly once per
training call. Copies, deep copies and pickles of instrumented objects are
plain, un-instrumented objects.

Every wrapper of one model, training or inference, serialises its calls
and weight copies on the model's one lock (:func:`model_lock`): a lock per
wrapper would let an inference call copy some weights before a training
step of another wrapper and the rest after it.
"""
import threading
import weakref
from typing import Any, Callable, Dict, Optional

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ..errors import createPoptorchError

# Instrumented tensor -> weak reference to the callable that syncs it.
_sync_of: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _sync_args(args: Any, kwargs: Optional[Dict[str, Any]]) -> None:
    for arg in list(args) + list((kwargs or {}).values()):
        if isinstance(arg, (list, tuple)):
            _sync_args(arg, None)
        elif isinstance(arg, torch.Tensor):
            ref = _sync_of.get(arg)
            sync = ref() if ref is not None else None
            if sync is not None:
                sync()


class _SyncOnAccess:
    """Mixin: every torch function on an instance syncs it first, then runs
    on the plain tensor. Subclasses define ``_plain_copy()``, the
    un-instrumented copy that ``copy.deepcopy`` returns."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _sync_args(args, kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = self._plain_copy()
        return memo[id(self)]


class _SyncingParameter(_SyncOnAccess, torch.nn.Parameter):
    """A parameter of a model wrapped for training."""

    def _plain_copy(self) -> torch.nn.Parameter:
        return torch.nn.Parameter(
            self.data.clone(memory_format=torch.preserve_format),
            self.requires_grad)


class _SyncingBuffer(_SyncOnAccess, torch.Tensor):
    """A buffer of a model wrapped for training."""

    def _plain_copy(self) -> torch.Tensor:
        return self.as_subclass(torch.Tensor).clone()

    def __reduce_ex__(self, protocol):
        return self.as_subclass(torch.Tensor).__reduce_ex__(protocol)

    def __repr__(self, *, tensor_contents=None):
        _sync_args((self,), None)
        return repr(self.as_subclass(torch.Tensor))


_SYNC_ATTRIBUTES = frozenset(("_parameters", "_buffers", "forward"))
_wrapper_classes: Dict[type, type] = {}


def _rebuild_unwrapped(cls: type) -> Any:
    return cls.__new__(cls)


def _wrapper_class(cls: type) -> type:
    """``Poptorch<cls>``: ``cls`` whose weight accesses sync from the
    device first."""
    if cls in _wrapper_classes:
        return _wrapper_classes[cls]

    def __getattribute__(self, name):
        if name in _SYNC_ATTRIBUTES:
            object.__getattribute__(self, "copyWeightsToHostIfNeeded")()
        return cls.__getattribute__(self, name)

    def __getattr__(self, name):
        value = cls.__getattr__(self, name)
        if isinstance(value, torch.nn.Parameter):
            self.copyWeightsToHostIfNeeded()
        return value

    def __reduce_ex__(self, protocol):
        return (_rebuild_unwrapped, (cls,), dict(self.__dict__))

    def copyWeightsToHostIfNeeded(self) -> bool:
        """Copies the weights from the device if a training call made the
        host copy stale. Returns True if it copied."""
        sync = _owner_method(self, 0)
        return sync() if sync is not None else False

    def destroy(self) -> None:
        """Destroys the PopTorch wrapper of this model (see
        ``PoplarExecutor.destroy``)."""
        destroy = _owner_method(self, 1)
        if destroy is not None:
            destroy()

    wrapper = type(f"Poptorch{cls.__name__}", (cls,), {
        "__getattribute__": __getattribute__, "__getattr__": __getattr__,
        "__reduce_ex__": __reduce_ex__,
        "copyWeightsToHostIfNeeded": copyWeightsToHostIfNeeded,
        "destroy": destroy, "_poptorch_original_class": cls,
        "__module__": cls.__module__, "__qualname__": f"Poptorch{cls.__qualname__}",
    })
    _wrapper_classes[cls] = wrapper
    return wrapper


# Model -> weak references to its wrapper's (sync, destroy) methods; model
# -> its sync callable (held here so that the tensors' weak references to it
# stay alive); model -> how many times its host weights were copied from a
# device.
_owners: WeakIdKeyDictionary = WeakIdKeyDictionary()
_syncs: WeakIdKeyDictionary = WeakIdKeyDictionary()
_weights_versions: WeakIdKeyDictionary = WeakIdKeyDictionary()


# Model -> the one lock of every wrapper of it (``model_lock``).
_locks: WeakIdKeyDictionary = WeakIdKeyDictionary()
_locks_guard = threading.Lock()


def model_lock(model: torch.nn.Module) -> "threading.RLock":
    """The lock that every wrapper of ``model`` holds for its calls and
    weight copies. Reentrant: a call of one wrapper reaches another's
    (an inference call syncs the weights of the training wrapper)."""
    with _locks_guard:
        lock = _locks.get(model)
        if lock is None:
            lock = _locks[model] = threading.RLock()
        return lock


def owner_lock(model: torch.nn.Module) -> "Optional[threading.RLock]":
    """The lock of the model wrapped for training that owns ``model``'s
    weights (see :func:`_training_owner`), None if no training wrapper
    owns them."""
    owner = _training_owner(model)
    return None if owner is None else model_lock(owner)


def _owner_method(model: torch.nn.Module, index: int) -> Optional[Callable]:
    refs = _owners.get(model)
    return refs[index]() if refs is not None else None


def is_wrapped(model: torch.nn.Module) -> bool:
    return type(model) in _wrapper_classes.values()


def wrapped_for(model: torch.nn.Module, sync: Callable[[], bool]) -> bool:
    """Whether ``model`` is wrapped with ``sync`` as its sync method."""
    return is_wrapped(model) and _owner_method(model, 0) == sync


def bump_weights_version(model: torch.nn.Module) -> None:
    """Records that ``model``'s host weights were copied from a device."""
    _weights_versions[model] = _weights_versions.get(model, 0) + 1


# Bumped by every wrap and unwrap: the owners found before may be stale.
_wrapping_generation = 0
# Model -> (generation, weak reference to its training owner or None), so
# that an inference call does not look its parameters up each time.
_owner_found: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _training_owner(model: torch.nn.Module) -> Optional[torch.nn.Module]:
    """The model wrapped for training that owns ``model``'s weights:
    ``model`` itself, or a model holding it as a sub-module (a wrapper that
    adds the loss, trained while ``model`` is evaluated)."""
    if is_wrapped(model):
        return model
    if not _owners:
        return None  # no model is wrapped for training
    found = _owner_found.get(model)
    if found is not None and found[0] == _wrapping_generation:
        owner = found[1]() if found[1] is not None else None
        if owner is not None or found[1] is None:
            return owner
    owner = None
    for param in model.parameters():
        ref = _sync_of.get(param)
        sync = ref() if ref is not None else None
        owner = getattr(sync, "owner", lambda: None)()
        if owner is not None:
            break
    _owner_found[model] = (_wrapping_generation, None if owner is None
                           else weakref.ref(owner))
    return owner


def current_weights_version(model: torch.nn.Module) -> Optional[int]:
    """Syncs the model wrapped for training that owns ``model``'s weights
    (see :func:`_training_owner`) and returns the version of its host
    weights (None for a model no training wrapper owns)."""
    owner = _training_owner(model)
    if owner is None:
        return None
    owner.copyWeightsToHostIfNeeded()
    return _weights_versions.get(owner, 0)


def wrap(model: torch.nn.Module, *, sync: Callable[[], bool],
         destroy: Callable[[], None]) -> None:
    """Instruments ``model`` (in place) for lazy sync: reading its weights
    calls ``sync()`` (which copies them from the device if they are newer)
    and ``model.destroy()`` calls ``destroy()``. Both are held weakly."""
    global _wrapping_generation
    for name, buffer in model.named_buffers():
        if type(buffer) not in (torch.Tensor, _SyncingBuffer):
            raise createPoptorchError(
                f"All buffers must be an instance of torch.Tensor (Got "
                f"{type(buffer)})")
    _wrapping_generation += 1
    _owners[model] = (weakref.WeakMethod(sync), weakref.WeakMethod(destroy))
    model.__class__ = _wrapper_class(type(model))
    sync = _make_sync(model)
    for param in model.parameters():
        if type(param) is torch.nn.Parameter:
            param.__class__ = _SyncingParameter
        _sync_of[param] = sync
    for buffer in model.buffers():
        if type(buffer) is torch.Tensor:
            buffer.__class__ = _SyncingBuffer
        _sync_of[buffer] = sync


def _make_sync(model: torch.nn.Module) -> Callable:
    model_ref = weakref.ref(model)

    def sync() -> None:
        model = model_ref()
        if model is not None:
            model.copyWeightsToHostIfNeeded()
    sync.owner = model_ref
    _syncs[model] = sync
    return weakref.ref(sync)


def unwrap(model: torch.nn.Module) -> None:
    """Undoes :func:`wrap`; raises if ``model`` was never wrapped."""
    global _wrapping_generation
    if not is_wrapped(model):
        raise createPoptorchError("model was never wrapped")
    _wrapping_generation += 1
    for _, sub in model.named_modules():
        for tensor in list(sub._parameters.values()) + \
                list(sub._buffers.values()):
            if tensor is None:
                continue
            _sync_of.pop(tensor, None)
            if type(tensor) is _SyncingParameter:
                tensor.__class__ = torch.nn.Parameter
            elif type(tensor) is _SyncingBuffer:
                tensor.__class__ = torch.Tensor
    _syncs.pop(model, None)
    _owners.pop(model, None)
    model.__class__ = type(model)._poptorch_original_class
