"""PoplarExecutor's public methods and error paths (spec 4)."""
import collections
import copy

import pytest
import torch

import poptorch
from ._models import MLP

TAIL = ("This error occurred because the inputs passed at runtime don't match "
        "the inputs used to compile the model.")


class TwoInputs(torch.nn.Module):
    def forward(self, x, y=None, *, scale=2):
        return x * scale if y is None else x * scale + y


# --- Construction -------------------------------------------------------------

def test_invalid_options_type():
    with pytest.raises(poptorch.Error, match=r"Invalid type: 'options' is of "
                       r"type <class 'dict'> \(Expected poptorch.Options\)"):
        poptorch.inferenceModel(torch.nn.Linear(2, 2), {})


def test_user_options_are_frozen_and_cloned():
    opts = poptorch.Options()
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        opts.deviceIterations(2)
    assert ipu.options is not opts
    assert ipu.options.output_mode == poptorch.OutputMode.All


def test_inference_rejects_gradient_accumulation():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    with pytest.raises(poptorch.Error, match="You must set poptorch.Options"
                       r"\(\).Training.gradientAccumulation to 1"):
        poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)


def test_executor_of_executor_wraps_the_user_model():
    model = MLP()
    inference = poptorch.inferenceModel(model)
    again = poptorch.inferenceModel(inference)
    assert again.model is model


def test_attribute_passthrough_and_parameter_proxy():
    model = MLP()
    ipu = poptorch.inferenceModel(model)
    assert ipu.fc1 is model.fc1
    assert [n for n, _ in ipu.named_parameters()] == \
        [n for n, _ in model.named_parameters()]
    assert hasattr(ipu.fc1.weight, "shape")
    assert "MLP(" in repr(ipu)


# --- Argument binding ---------------------------------------------------------

def test_binding_errors():
    ipu = poptorch.inferenceModel(TwoInputs())
    with pytest.raises(AssertionError, match="Too many arguments provided"):
        ipu(torch.ones(2), torch.ones(2), torch.ones(2))
    with pytest.raises(AssertionError, match=r"z is not a valid parameter."
                       r"Allowed values are \['x', 'y', 'scale'\]"):
        ipu(torch.ones(2), z=1)
    with pytest.raises(AssertionError, match="Parameter x was passed more "
                       "than once"):
        ipu(torch.ones(2), x=torch.ones(2))
    with pytest.raises(poptorch.Error, match="Mandatory parameter x missing"):
        ipu()


@pytest.mark.parametrize("second_call,message", [
    ((torch.ones(2, dtype=torch.int64),), "Data type mismatch for x: expected "
     "torch.float32 but got torch.int64."),
    ((torch.ones(3),), r"Shape mismatch for x: expected torch.Size\(\[2\]\) "
     r"but got torch.Size\(\[3\]\)."),
    ((torch.ones(2), torch.ones(2)), "Type mismatch for y: expected "
     "<class 'NoneType'> but got <class 'torch.Tensor'>."),
])
def test_no_recompilation_on_changed_inputs(second_call, message):
    ipu = poptorch.inferenceModel(TwoInputs())
    ipu(torch.ones(2))
    with pytest.raises(poptorch.Error, match=message) as info:
        ipu(*second_call)
    assert TAIL in info.value.message


def test_changed_non_tensor_value():
    ipu = poptorch.inferenceModel(TwoInputs())
    ipu(torch.ones(2), scale=5)
    with pytest.raises(poptorch.Error, match="Value mismatch for scale: "
                       "expected 5 but got 3."):
        ipu(torch.ones(2), scale=3)


def test_container_mismatches():
    class Model(torch.nn.Module):
        def forward(self, xs):
            return xs[0] if isinstance(xs, (list, tuple)) else xs["x"]

    ipu = poptorch.inferenceModel(Model())
    ipu([torch.ones(1), torch.ones(1)])
    with pytest.raises(poptorch.Error, match="Type mismatch for xs"):
        ipu((torch.ones(1), torch.ones(1)))
    with pytest.raises(poptorch.Error, match="Length mismatch for xs: "
                       "expected 2 elements but got 3."):
        ipu([torch.ones(1)] * 3)
    ipu = poptorch.inferenceModel(Model())
    ipu({"x": torch.ones(1), "y": torch.ones(1)})
    ipu({"y": torch.ones(1), "x": torch.ones(1)})  # key order is irrelevant
    with pytest.raises(poptorch.Error, match="Keys mismatch for xs: "
                       "Unexpected arguments: z. Missing arguments: y."):
        ipu({"x": torch.ones(1), "z": torch.ones(1)})


def test_destroy_then_recompile_with_new_shapes():
    ipu = poptorch.inferenceModel(TwoInputs())
    ipu(torch.ones(2))
    ipu.destroy()
    assert not ipu.isCompiled()
    torch.testing.assert_close(ipu(torch.ones(3)), torch.full((3,), 2.0))


# --- Custom argument parsers --------------------------------------------------

Pair = collections.namedtuple("Pair", "a b")


class Box:
    def __init__(self, a, b):
        self.a, self.b = a, b


class BoxParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):
        yield struct.a
        yield struct.b

    def reconstruct(self, original, tensor_iterator):
        return Box(next(tensor_iterator), next(tensor_iterator))


def test_custom_arg_parser():
    class Model(torch.nn.Module):
        def forward(self, box):
            return Box(box.a + box.b, box.a * box.b)

    poptorch.registerCustomArgParser(Box, BoxParser())
    try:
        opts = poptorch.Options().deviceIterations(2)
        out = poptorch.inferenceModel(Model(), opts)(
            Box(torch.ones(4, 2), torch.full((4, 2), 3.0)))
        assert isinstance(out, Box)
        torch.testing.assert_close(out.a, torch.full((4, 2), 4.0))
        torch.testing.assert_close(out.b, torch.full((4, 2), 3.0))
    finally:
        poptorch.registerCustomArgParser(Box, None)
    with pytest.raises(poptorch.Error, match="arg_parser must inherit from "
                       "ICustomArgParser"):
        poptorch.registerCustomArgParser(Box, object())


# --- Device attachment, compile, misc -------------------------------------------

def test_attach_detach_cycle():
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    with pytest.raises(poptorch.Error, match="Model has not been compiled or "
                       "has been destroyed."):
        ipu.detachFromDevice()
    assert not ipu.isAttachedToDevice()
    ipu.compile(torch.ones(1, 2))
    assert ipu.isCompiled() and ipu.isAttachedToDevice()
    with pytest.raises(poptorch.Error, match="Device is already attached"):
        ipu.attachToDevice()
    ipu.detachFromDevice()
    with pytest.raises(poptorch.Error, match="Device is not attached"):
        ipu.detachFromDevice()
    ipu(torch.ones(1, 2))  # attaches automatically
    assert ipu.isAttachedToDevice()


def test_compile_twice_warns(caplog):
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    ipu.compile(torch.ones(1, 2))
    import logging
    with caplog.at_level(logging.WARNING, logger="poptorch::python"):
        poptorch.logger.propagate = True
        try:
            ipu.compile(torch.ones(1, 2))
        finally:
            poptorch.logger.propagate = False
    assert "Call to compile() ignored" in caplog.text


def test_offline_device_cannot_run():
    opts = poptorch.Options().useOfflineIpuTarget()
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    ipu.compile(torch.ones(1, 2))
    with pytest.raises(AssertionError, match="Trying to run a model on an "
                       "offline device"):
        ipu(torch.ones(1, 2))


def test_no_executable_errors():
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    for call in (ipu.copyWeightsToHost, ipu.copyWeightsToDevice,
                 ipu.copyNamedBuffersToDevice, lambda: ipu.rng_state,
                 lambda: ipu.save("x")):
        with pytest.raises(poptorch.Error, match="Model has not been compiled"):
            call()
    with pytest.raises(poptorch.Error, match="Please compile the model"):
        ipu.compilationTime()
    with pytest.raises(AssertionError, match="Model must be compiled"):
        ipu.getTensorNames()
    assert ipu.getPerfCounters() == {k: [[]] for k in
                                     ("input", "input_complete", "output",
                                      "output_complete")}


def test_compilation_time_and_perf_counters():
    opts = poptorch.Options().deviceIterations(2)
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    ipu(torch.ones(2, 2))
    assert ipu.compilationTime().total_seconds() > 0
    counters = ipu.getPerfCounters()
    assert len(counters["input"][0]) == 2
    lo, hi, avg = ipu.getComputeLatency()
    assert 0 <= lo <= avg <= hi


def test_cycle_count_errors():
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    with pytest.raises(poptorch.Error, match="Cycle count logging is disabled"):
        ipu.cycleCount()


def test_rng_state_round_trip_reproduces_dropout():
    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.dropout(x, 0.5, training=True)

    opts = poptorch.Options().randomSeed(42)
    ipu = poptorch.inferenceModel(Model(), opts)
    x = torch.ones(1000)
    ipu(x)
    state = ipu.rng_state
    first = ipu(x)
    ipu.rng_state = state
    torch.testing.assert_close(ipu(x), first)
    assert not torch.equal(ipu(x), first)
    again = poptorch.inferenceModel(Model(), opts)
    host_before = torch.get_rng_state()
    again(x)
    torch.testing.assert_close(torch.get_rng_state(), host_before)


def test_anchored_gradient():
    torch.manual_seed(0)
    opts = poptorch.Options()
    opts.anchorTensor("grad_w", "Gradient___fc1.weight")
    model = MLP()
    reference = copy.deepcopy(model)
    ipu = poptorch.trainingModel(model, opts)
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    ipu(x, y)
    reference(x, y)[1].backward()
    names = ipu.getTensorNames()
    assert "Gradient___fc1.weight" in names and "fc1.weight" in names
    torch.testing.assert_close(ipu.getAnchoredTensor("grad_w"),
                               reference.fc1.weight.grad)
    with pytest.raises(AssertionError, match="No tensor with name nope found"):
        ipu.getAnchoredTensor("nope")


def test_non_contiguous_inputs_are_converted():
    model = torch.nn.Linear(4, 2)
    x = torch.randn(4, 8).t()  # [8, 4], not contiguous
    assert not x.is_contiguous()
    opts = poptorch.Options().deviceIterations(2)
    out = poptorch.inferenceModel(model, opts)(x)
    torch.testing.assert_close(out, model(x).detach())
