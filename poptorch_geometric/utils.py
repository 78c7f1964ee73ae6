"""Utilities of PopTorch Geometric's public API: fixing the aggregation
size of message-passing layers, and :class:`TrainingStepper`, which checks
that a model trains the same on the simulated IPU as on the CPU.

Example::

    >>> from torch_geometric.nn import GCNConv
    >>> conv = GCNConv(2, 2)
    >>> set_aggregation_dim_size(conv, 5)
    >>> edge_index = torch.tensor([[0, 1], [1, 2]])
    >>> conv(torch.ones(3, 2), edge_index).shape   # 5 rows, not 3
    torch.Size([5, 2])
"""
import copy
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import torch
from torch_geometric.nn import MessagePassing

import poptorch_core as poptorch

__all__ = ["set_aggregation_dim_size", "TrainingStepper"]


def set_aggregation_dim_size(model: torch.nn.Module, dim_size: int) -> None:
    """Makes every ``MessagePassing`` layer of ``model`` aggregate into
    ``dim_size`` rows, at least the number of nodes of a batch (an
    aggregate forward pre-hook; calling this twice stacks two hooks)."""

    def hook(module: MessagePassing, inputs: Tuple[Dict[str, Any]]):
        aggr_kwargs = inputs[-1]
        aggr_kwargs["dim_size"] = dim_size
        return aggr_kwargs

    for module in model.modules():
        if isinstance(module, MessagePassing):
            module.register_aggregate_forward_pre_hook(hook)


def _output(result: Any) -> Any:
    """The model output of a ``(output, loss)`` result, or the result."""
    return result[0] if isinstance(result, tuple) else result


def _leading(actual: Any, expected: Any) -> Tuple[Any, Any]:
    """Both cut to their shared leading rows (padded against unpadded)."""
    rows = min(actual.shape[0], expected.shape[0])
    return actual[:rows], expected[:rows]


class TrainingStepper:
    """Trains copies of ``model`` on the CPU and on the simulated IPU with
    the same optimizer and compares outputs, losses and parameters after
    every step.

    The model's ``forward(*batch)`` returns ``(output, loss)``. The same
    ``optimizer`` class (``poptorch.optim.Adam`` by default) is used on both
    sides. ``rtol``/``atol``/``equal_nan`` go to
    ``torch.testing.assert_close``; a mismatch raises ``AssertionError``.

    Example::

        >>> class Model(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.lin = torch.nn.Linear(3, 1)
        ...     def forward(self, x, y):
        ...         out = self.lin(x)
        ...         return out, torch.nn.functional.mse_loss(out, y)
        >>> stepper = TrainingStepper(Model(), lr=0.01)
        >>> stepper.run(3, (torch.randn(8, 3), torch.randn(8, 1)))
    """

    def __init__(self, model: torch.nn.Module, lr: float = 0.001,
                 optimizer: Type[torch.optim.Optimizer] = poptorch.optim.Adam,
                 options: Optional[poptorch.Options] = None,
                 rtol: Optional[float] = None, atol: Optional[float] = None,
                 enable_fp_exception: bool = True,
                 equal_nan: bool = False) -> None:
        model.train()
        self.lr, self.rtol, self.atol = lr, rtol, atol
        self.equal_nan = equal_nan
        self.cpu_model = copy.deepcopy(model)
        params = list(self.cpu_model.parameters())
        self.optimizer = optimizer(params, lr=lr) if params else None
        self.ipu_model = copy.deepcopy(model)
        options = options if options is not None else poptorch.Options()
        if enable_fp_exception:
            options.Precision.enableFloatingPointExceptions(True)
        self.training_model = None
        if params:
            self.training_model = poptorch.trainingModel(
                self.ipu_model, options=options,
                optimizer=optimizer(self.ipu_model.parameters(), lr=lr))
        self.inference_model = poptorch.inferenceModel(self.ipu_model,
                                                       options=options)
        self.check_parameters()

    def assert_close(self, actual: Any, expected: Any, id: str) -> None:
        """``torch.testing.assert_close`` with the stepper's tolerances; the
        message starts with ``id``."""
        torch.testing.assert_close(
            actual, expected, rtol=self.rtol, atol=self.atol,
            equal_nan=self.equal_nan, msg=lambda msg: f"{id}: {msg}")

    def check_parameters(self) -> None:
        """The CPU and IPU copies' parameters are equal, name by name."""
        for (name, cpu), (_, ipu) in zip(self.cpu_model.named_parameters(),
                                         self.ipu_model.named_parameters()):
            self.assert_close(ipu, cpu, f"Parameter {name}")

    def cpu_step(self, batch: Sequence[Any]) -> Tuple[Any, torch.Tensor]:
        """One optimizer step of the CPU copy; returns ``(output, loss)``."""
        self.optimizer.zero_grad()
        out, loss = self.cpu_model(*batch)
        loss.backward()
        self.optimizer.step()
        return out, loss

    def ipu_step(self, batch: Sequence[Any], copy_weights: bool = True
                 ) -> Tuple[Any, torch.Tensor]:
        """One step of the training model; returns ``(output, loss)``."""
        out, loss = self.training_model(*batch)
        if copy_weights:
            self.training_model.copyWeightsToHost()
        return out, loss

    def run(self, num_steps: int, *batches: Sequence[Any]) -> None:
        """``run(num_steps, batch)`` trains both copies on ``batch``;
        ``run(num_steps, cpu_batch, ipu_batch)`` trains the CPU copy on
        ``cpu_batch`` and the IPU one on ``ipu_batch`` (for example
        unpadded and padded) and compares outputs over their shared
        leading rows. Outputs and parameters are compared after each step,
        the losses at the end."""
        if len(batches) not in (1, 2):
            raise TypeError("run() takes (num_steps, batch) or (num_steps, "
                            f"cpu_batch, ipu_batch), got {len(batches)} "
                            "batches.")
        if self.training_model is None:
            raise ValueError("TrainingStepper.run needs a model with "
                             "parameters to train.")
        cpu_batch, ipu_batch = batches[0], batches[-1]
        self.cpu_model.train()
        cpu_losses: List[torch.Tensor] = []
        ipu_losses: List[torch.Tensor] = []
        for step in range(num_steps):
            cpu_out, cpu_loss = self.cpu_step(cpu_batch)
            ipu_out, ipu_loss = self.ipu_step(ipu_batch)
            actual, expected = ipu_out, cpu_out.detach()
            if len(batches) == 2:
                actual, expected = _leading(actual, expected)
            self.assert_close(actual, expected, f"Output of step {step}")
            self.check_parameters()
            cpu_losses.append(cpu_loss.detach())
            ipu_losses.append(ipu_loss)
        self.assert_close(torch.stack(ipu_losses).reshape(-1),
                          torch.stack(cpu_losses).reshape(-1), "Losses")

    def run_inference(self, batch: Sequence[Any]) -> None:
        """Compares the CPU copy in eval mode with the inference model."""
        self.cpu_model.eval()
        with torch.no_grad():
            cpu_out = _output(self.cpu_model(*batch))
        ipu_out = _output(self.inference_model(*batch))
        self.assert_close(ipu_out, cpu_out, "Inference output")

    def benchmark(self, num_steps: int, batch: Sequence[Any],
                  devices: Union[str, Sequence[str]] = ("ipu", )
                  ) -> Dict[str, float]:
        """Seconds for ``num_steps`` training steps after one warm-up step,
        per device in ``devices`` ("ipu", "cpu"):
        ``{"ipu_time": s, "cpu_time": s}``."""
        devices = (devices, ) if isinstance(devices, str) else tuple(devices)
        if "gpu" in devices:
            raise NotImplementedError("TrainingStepper.benchmark has no GPU "
                                      "reference: use 'ipu' or 'cpu'.")
        steps = {"ipu": self.ipu_step, "cpu": self.cpu_step}
        times = {}
        for device in devices:
            if device not in steps:
                raise ValueError(f"Unknown device {device!r}: use 'ipu' or "
                                 "'cpu'.")
            steps[device](batch)
            start = time.perf_counter()
            for _ in range(num_steps):
                steps[device](batch)
            times[f"{device}_time"] = time.perf_counter() - start
        return times
