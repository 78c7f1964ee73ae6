"""The executor's link to the device model (``poptorch_core.device``).

After tracing, :func:`after_compile` describes the compiled model to the
device model and applies ``opts.Simulator.memoryCheck``: ``"error"`` raises
the out-of-memory ``poptorch.Error`` before the model can run, ``"warn"``
logs it. :meth:`DeviceEstimate.report` is what
``poptorch_model.simulationReport()`` returns.
"""
from typing import Any, Callable, Optional

from .. import device
from .._logging import logger
from ..enums import OutputMode
from ..options import Options
from .._tracing.capture import CapturedModel
from .micro_batches import BatchLayout
from .device_state import DeviceState
from .pipeline import Placement
from .state import ExecutorState


class DeviceEstimate:
    """The device model's view of one compiled model; the report is built
    on first use and again when the optimizer is replaced."""

    def __init__(self, spec: device.StepSpec,
                 optimizer_source: Callable[[], Any]):
        self._spec = spec
        self._optimizer_source = optimizer_source
        self._report: Optional[device.SimulationReport] = None

    def report(self) -> device.SimulationReport:
        optimizer = self._optimizer_source()
        if self._report is None or optimizer is not self._spec.optimizer:
            self._spec.optimizer = optimizer
            self._report = device.simulate(self._spec)
        return self._report


def _ipu_version(options: Options) -> int:
    # An offline target names the IPU the model is compiled for.
    if options.exists("ipu_version"):
        return options.ipu_version
    return options.Simulator.ipu_version


def _param_specs(captured: CapturedModel, device_state: DeviceState) -> list:
    specs = []
    for index, (names, host, dev) in enumerate(zip(
            captured.param_names, device_state.host_params,
            device_state.params)):
        grouping = device_state.grouped.get(index)
        specs.append(device.ParamSpec(
            names[0], host, trainable=dev.requires_grad,
            groups=grouping.num_groups if grouping else 1,
            group_size=grouping.group_size if grouping else None))
    return specs


def step_spec(state: ExecutorState, captured: CapturedModel,
              placement: Placement, device_state: DeviceState,
              layout: BatchLayout) -> device.StepSpec:
    """The :class:`~poptorch_core.device.StepSpec` of a compiled model
    (``device_state``: its weights, with their replica groupings)."""
    opts = state.options
    return device.StepSpec(
        graph=captured.graph_module, training=state.training,
        params=_param_specs(captured, device_state),
        num_buffers=len(captured.buffer_names),
        device_iterations=layout.device_iterations,
        gradient_accumulation=layout.gradient_accumulation,
        replicas=layout.replicas, blocks=dict(placement.blocks),
        strategy=opts.execution_strategy,
        available_memory=dict(opts.available_memory_proportion),
        ipu_version=_ipu_version(opts),
        output_mode=OutputMode(opts.output_mode),
        output_period=opts.output_return_period,
        excludes=opts.source_location_excludes)


def after_compile(state: ExecutorState, captured: CapturedModel,
                  placement: Placement, device_state: DeviceState,
                  layout: BatchLayout) -> DeviceEstimate:
    """Describes the compiled model and applies ``memoryCheck``."""
    link = state.optimizer_link
    estimate = DeviceEstimate(
        step_spec(state, captured, placement, device_state, layout),
        (lambda: link.optimizer) if link is not None else (lambda: None))
    mode = state.options.Simulator.memory_check
    if mode == "off":
        return estimate
    try:
        report = estimate.report()
    except Exception as error:  # noqa: BLE001
        if mode == "error":
            raise
        # An estimate that fails must not stop a model that runs.
        logger.warning("The simulated IPU could not estimate this model "
                       "(%s: %s); it runs without a memory check.",
                       type(error).__name__, error)
        return estimate
    device.check_memory(report, mode)
    return estimate
