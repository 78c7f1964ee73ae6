"""``import poptorch`` for PopTorch scripts: an alias of ``poptorch_core``.

Every ``poptorch`` and ``poptorch.<sub>`` name resolves to the very same
module and class objects as ``poptorch_core`` (never to copies), so
``poptorch.Error is poptorch_core.Error`` and ``isinstance`` checks work
whichever name a script imports.
"""
import importlib
import importlib.abc
import importlib.util
import sys

import poptorch_core as _core

# PopTorch's C++ extension module was importable as poptorch.poptorch_core.
_RENAMED = {"poptorch.poptorch_core": "poptorch_core._native"}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``poptorch.X`` to the already-imported ``poptorch_core.X``."""

    def find_spec(self, fullname, path=None, target=None):
        del path, target
        # poptorch.__main__ is a real module (``python -m poptorch``), which
        # runpy must load from its file.
        if not fullname.startswith("poptorch.") or \
                fullname == "poptorch.__main__":
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        target = _RENAMED.get(
            spec.name, "poptorch_core." + spec.name[len("poptorch."):])
        module = importlib.import_module(target)
        # importlib overwrites __spec__ of the module we hand back; keep the
        # real one so reloads and pickling by module name stay correct.
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # Already executed under its real name: only restore its spec.
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())
sys.modules[__name__] = _core
