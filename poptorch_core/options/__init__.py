"""``poptorch.Options``: the option tree of a PopTorch model.

Modules, bottom-up: ``_dict`` (``OptionsDict``, the mechanics every
namespace shares), ``_namespaces`` (``Training``, ``Precision``,
``TensorLocations``, ``Distributed``, ``Jit``), ``_simulator`` (the
``Simulator`` namespace, which PopTorch does not have), ``_strategies``
(execution strategies and stages), ``_config`` (options from JSON and
files), ``_progress`` (the compilation progress bar) and ``_options``
(the top-level ``Options``).

Example::

    >>> opts = poptorch.Options().deviceIterations(2)
    >>> opts.Training.gradientAccumulation(4).gradient_accumulation
    4
    >>> opts.device_iterations * opts.Training.gradient_accumulation
    8
"""
from ._options import *  # noqa: F401,F403
from ._options import __all__  # noqa: F401
