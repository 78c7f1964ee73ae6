"""The examples in docstrings run and print what they say.

Examples are written for users, who have ``import torch`` and
``import poptorch`` at the top of their script: both names are given to
every example. Every module of ``poptorch_core`` and ``poptorch_geometric``
that has examples is found by walking the packages, so a new module's
examples run without anyone listing it; only the modules in ``EXCLUDED``
are left out, each for the reason given there.
"""
import doctest
import importlib
import pkgutil

import pytest
import torch

import poptorch

PACKAGES = ("poptorch_core", "poptorch_geometric")

EXCLUDED = {
    # Importing it runs the installation self-check (it is ``python -m
    # poptorch_core``); tests/core cover it.
    "poptorch_core.__main__":
        "a script, not a module: importing it runs the self-check",
    # Its example changes ``malloc`` for the whole test process; its own
    # test runs the example's calls in a subprocess.
    "poptorch_core._executor.backends.host_memory":
        "changes malloc settings for the whole process",
}


def _module_names():
    for package in PACKAGES:
        yield package
        path = importlib.import_module(package).__path__
        for info in pkgutil.walk_packages(path, package + "."):
            yield info.name


def _has_examples(name: str) -> bool:
    module = importlib.import_module(name)
    return any(test.examples for test in doctest.DocTestFinder().find(module))


MODULES = [name for name in _module_names()
           if name not in EXCLUDED and _has_examples(name)]


def test_discovery_finds_the_documented_modules():
    # A broken walk (wrong package path, every module excluded) must not
    # turn into a silent pass of zero examples.
    assert "poptorch_core.options._options" in MODULES
    assert "poptorch_geometric.fixed_size_options" in MODULES
    assert len(MODULES) >= 60, MODULES


def test_excluded_modules_exist():
    names = set(_module_names())
    assert set(EXCLUDED) <= names, set(EXCLUDED) - names


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name),
                             extraglobs={"torch": torch, "poptorch": poptorch},
                             optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"every example of {name} is skipped"
    assert result.failed == 0, f"{result.failed} example(s) of {name} fail"
