"""Named tensors of a compiled model: ``getTensorNames`` and anchors.

The simulator names tensors after PopART's conventions for what it can
observe: inputs (``input/<i>``), weights (their model names), the reduced
gradient of the last optimizer step (``Gradient___<name>``), the updated
weights (``UpdatedVar___<name>``) and, in training, the loss scale of the
last step (``finalLossScale``: the optimizer's ``loss_scaling`` times the
automatic loss scaling factor). Anchored tensors are read after each call
(the value of the last device iteration).
"""
from typing import Dict, List

import torch

from ..errors import createPoptorchError
from ..options import Options
from .program import Program

FINAL_LOSS_SCALE = "finalLossScale"


def _param_index(program: Program) -> Dict[str, int]:
    return {name: i for i, names in enumerate(program.captured.param_names)
            for name in names}


def tensor_names(program: Program) -> List[str]:
    names = [f"input/{i}" for i in range(program.captured.num_inputs)]
    params = [n for names in program.captured.param_names for n in names]
    buffers = [n for names in program.captured.buffer_names for n in names]
    names += params + buffers
    if program.training:
        names += [f"Gradient___{n}" for n in params]
        names += [f"UpdatedVar___{n}" for n in params]
        names.append("loss")
        names.append(FINAL_LOSS_SCALE)
    return names


def read_anchors(options: Options,
                 program: Program) -> Dict[str, torch.Tensor]:
    """The anchored tensors' values after a call, by short name."""
    index = _param_index(program)
    values = {}
    for short, anchor in options.anchors.items():
        long_name = anchor.long_name
        if long_name == FINAL_LOSS_SCALE and program.training:
            scale = program.device_optimizer.last_loss_scale
            if scale is not None:
                values[short] = torch.tensor(scale, dtype=torch.float32)
            continue
        kind, _, name = long_name.rpartition("___")
        if name not in index or kind not in ("", "Gradient", "UpdatedVar"):
            raise createPoptorchError(
                f"Cannot anchor tensor {long_name!r}: the simulator can anchor "
                "weights by name, Gradient___<name> / UpdatedVar___<name> and "
                "(training) finalLossScale; "
                "see getTensorNames() for the names of this model.")
        i = index[name]
        if kind == "Gradient":
            if i not in program.last_gradients:
                continue
            values[short] = program.last_gradients[i].clone().cpu()
        else:
            values[short] = program.state.params[i].detach().clone().cpu()
    return values
