"""``module_repr`` and ``print``: module printing that shows block hooks."""
import builtins

import torch

__all__ = ["module_repr", "print"]


def _hook_prefix(module: torch.nn.Module) -> str:
    return "".join(f"{hook!r} " for hook in module._forward_pre_hooks.values()
                   if type(hook).__name__ in ("BeginBlock", "_BeginBlockHook"))


def module_repr(module: torch.nn.Module) -> str:
    """Like ``repr(module)``, with each forward pre-hook of a block (for
    example ``BeginBlock(user_id=None, ipu_id=1)``) in front of the module
    name."""
    lines = []
    for key, child in module._modules.items():
        child_repr = module_repr(child) if child is not None else "None"
        child_repr = child_repr.replace("\n", "\n  ")
        lines.append(f"({key}): {_hook_prefix(child) if child is not None else ''}"
                     f"{child_repr}")
    extra = module.extra_repr()
    body = ([extra] if extra else []) + lines
    name = module._get_name()
    if not body:
        return f"{name}()"
    if not lines and "\n" not in extra:
        return f"{name}({extra})"
    return f"{name}(\n  " + "\n  ".join(body) + "\n)"


def print(*args, **kwargs) -> None:  # pylint: disable=redefined-builtin
    """``builtins.print`` that prints modules with :func:`module_repr`."""
    builtins.print(*(module_repr(a) if isinstance(a, torch.nn.Module) else a
                     for a in args), **kwargs)
