"""PopTorch on a simulated IPU.

``import poptorch_core as poptorch`` (or plain ``import poptorch``) gives the
PopTorch 3.4 API: models are captured by dispatch tracing into a static graph,
checked against IPU rules and run on the host with PopTorch's semantics for
device iterations, gradient accumulation, replication and output modes.

Example::

    >>> import torch, poptorch
    >>> model = torch.nn.Linear(4, 2)
    >>> opts = poptorch.Options().deviceIterations(2)
    >>> ipu_model = poptorch.inferenceModel(model, opts)
    >>> ipu_model(torch.randn(8, 4)).shape
    torch.Size([8, 2])
"""
# Public names come from the submodules' ``__all__`` lists, as in PopTorch.
from ._version import __version__
from .errors import Error, RecoverableError, UnrecoverableError, \
    createPoptorchError
from ._logging import logger, setLogLevel
from ._impl import isRunningOnIpu, registerPreCompileHook, \
    registerPostCompileHook, _OverwriteContextManager
from ._args_parser import ICustomArgParser, registerCustomArgParser
from ._utils import accessAttributes, getIpuTensorId
from ._module_repr import *  # noqa: F401,F403  (module_repr, print)
from .enums import *  # noqa: F401,F403
from .options import *  # noqa: F401,F403
from .annotations import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403
from ._tracing import *  # noqa: F401,F403
from ._ir import *  # noqa: F401,F403
from ._executor import *  # noqa: F401,F403
from .data import *  # noqa: F401,F403
from . import distributed  # installs the executor's scale-out hook
from . import enums, options, optim, profiling, testing
from . import _native as poptorch_core
from ._native import ipuHardwareVersion as _ipuHardwareVersion
from . import plugins  # what PopTorch Geometric uses beyond PopTorch's API


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    """Always False: the simulator has no IPU hardware."""
    return _ipuHardwareVersion(num_ipus) != 0


def ipuHardwareVersion() -> int:
    """Raises: there is no IPU hardware on this system."""
    raise AssertionError("No IPU hardware available on this system")


def importPoptorchMetadataFromFile(filename: str):
    """Reads the metadata stored by ``PoplarExecutor.save``."""
    from ._executor.serialization import read_metadata
    return read_metadata(filename)
