"""PopTorch's ``poptorch.*`` ops, with both of their meanings.

Plain CPU calls (outside tracing) use PopTorch's CPU kernels' meaning; while
a model is traced for the simulated IPU (``poptorch.isRunningOnIpu()``) the
ops emit graph code with the IPU meaning, which keeps working when the
captured graph is re-run on new inputs and under autograd. Ops whose work
must happen at run time are ``torch.ops.poptorch.*`` custom ops.

Example::

    >>> x = torch.arange(6.0)
    >>> poptorch.identity_loss(x.pow(2), reduction="mean")
    tensor(9.1667)
    >>> poptorch.dynamic_slice(x, 0, torch.tensor(2), 3, 1)
    tensor([2., 3., 4.])
"""
from .cluster import *  # noqa: F401,F403
from .control_flow import *  # noqa: F401,F403
from .ctc import *  # noqa: F401,F403
from .custom import *  # noqa: F401,F403
from .hints import *  # noqa: F401,F403
from .host import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .printing import *  # noqa: F401,F403
from .scopes import *  # noqa: F401,F403
from .slicing import *  # noqa: F401,F403
from . import (cluster, control_flow, ctc, custom, hints, host, losses,
               printing, scopes, slicing)

__all__ = (cluster.__all__ + control_flow.__all__ + ctc.__all__ +
           custom.__all__ + hints.__all__ + host.__all__ + losses.__all__ +
           printing.__all__ + scopes.__all__ + slicing.__all__)
