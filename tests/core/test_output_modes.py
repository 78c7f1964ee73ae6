"""Output shapes and contents per output mode (spec 3.2, 3.3)."""
import collections

import pytest
import torch

import poptorch
from ._models import LinearMSE


def _inference(model, **opts_kw):
    opts = poptorch.Options().deviceIterations(opts_kw.pop("D", 1))
    if "mode" in opts_kw:
        opts.outputMode(opts_kw.pop("mode"), opts_kw.pop("period", None))
    if "R" in opts_kw:
        opts.replicationFactor(opts_kw.pop("R"))
    return poptorch.inferenceModel(model, opts)


@pytest.fixture
def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(6, 20)


def test_all_mode(linear):
    x = torch.randn(10, 1, 5, 6)
    out = _inference(linear, D=10, mode=poptorch.OutputMode.All)(x)
    assert out.shape == (10, 1, 5, 20)
    torch.testing.assert_close(out, linear(x).detach())


def test_default_is_all_for_inference(linear):
    x = torch.randn(10, 1, 5, 6)
    opts = poptorch.Options().deviceIterations(10)
    out = poptorch.inferenceModel(linear, opts)(x)
    assert out.shape == (10, 1, 5, 20)
    assert opts.output_mode == poptorch.OutputMode.Default  # user's untouched


def test_final_mode(linear):
    x = torch.randn(10, 1, 5, 6)
    out = _inference(linear, D=10, mode=poptorch.OutputMode.Final)(x)
    assert out.shape == (1, 1, 5, 20)
    torch.testing.assert_close(out, linear(x).detach()[-1:])


def test_sum_mode(linear):
    x = torch.randn(10, 1, 5, 6)
    out = _inference(linear, D=10, mode=poptorch.OutputMode.Sum)(x)
    assert out.shape == (1, 1, 5, 20)
    torch.testing.assert_close(out, linear(x).detach().sum(0, keepdim=True),
                               rtol=1e-5, atol=1e-5)


def test_every_n_mode(linear):
    x = torch.randn(10, 1, 5, 6)
    out = _inference(linear, D=10, mode=poptorch.OutputMode.EveryN,
                     period=5)(x)
    native = linear(x).detach()
    assert out.shape == (2, 1, 5, 20)
    torch.testing.assert_close(out, native[[4, 9]])


@pytest.mark.parametrize("mode,period,loss_shape,out_shape", [
    (poptorch.OutputMode.All, None, (1000,), (1000, 10)),
    (poptorch.OutputMode.Final, None, (), (1, 10)),
    (poptorch.OutputMode.Default, None, (), (1, 10)),
    (poptorch.OutputMode.EveryN, 20, (50,), (50, 10)),
    (poptorch.OutputMode.Sum, None, (), (1, 10)),
])
def test_training_shapes(mode, period, loss_shape, out_shape):
    opts = poptorch.Options().deviceIterations(1000)
    opts.outputMode(mode, period)
    model = poptorch.trainingModel(LinearMSE(10, 10), opts)
    out, loss = model(torch.randn(1000, 10), torch.randn(1000, 10))
    assert loss.shape == loss_shape
    assert out.shape == out_shape


def test_replicated_final_training():
    opts = poptorch.Options().replicationFactor(2)
    model = poptorch.trainingModel(LinearMSE(10, 10), opts)
    out, loss = model(torch.randn(8, 10), torch.randn(8, 10))
    assert out.shape == (8, 10)
    assert loss.shape == (2,)


def test_host_constants_are_not_batched():
    class Model(torch.nn.Module):
        def forward(self, x):
            c = torch.tensor([1.0])
            return c, x + c, x

    opts = poptorch.Options().deviceIterations(4)
    c, y, x_out = poptorch.inferenceModel(Model(), opts)(torch.ones(8, 2))
    assert c.shape == (1,)
    torch.testing.assert_close(y, torch.full((8, 2), 2.0))
    torch.testing.assert_close(x_out, torch.ones(8, 2))


Pair = collections.namedtuple("Pair", ["a", "b"])


def test_containers_are_rebuilt():
    class Model(torch.nn.Module):
        def forward(self, x):
            return {"list": [x + 1, (x * 2, "label", 3)],
                    "pair": Pair(x - 1, None),
                    "ordered": collections.OrderedDict(z=x, y=x * 3)}

    out = poptorch.inferenceModel(Model())(torch.ones(2, 2))
    assert list(out) == ["list", "pair", "ordered"]
    assert isinstance(out["pair"], Pair) and out["pair"].b is None
    assert out["list"][1][1:] == ("label", 3)
    assert isinstance(out["ordered"], collections.OrderedDict)
    assert list(out["ordered"]) == ["z", "y"]
    torch.testing.assert_close(out["ordered"]["y"], torch.full((2, 2), 3.0))


def test_none_and_bare_tensor():
    class Nothing(torch.nn.Module):
        def forward(self, x):
            x += 1

    x = torch.zeros(2)
    assert poptorch.inferenceModel(Nothing())(x) is None
    torch.testing.assert_close(x, torch.ones(2))


def test_backward_on_outputs_is_an_error(linear):
    out = poptorch.inferenceModel(linear)(torch.randn(2, 6))
    with pytest.raises(poptorch.Error, match="backward\\(\\) cannot be called "
                       "explicitly on outputs of a PopTorch model"):
        out.backward()


def test_64_bit_outputs_are_demoted():
    class Model(torch.nn.Module):
        def forward(self, x):
            return x.argmax(dim=1), x.double(), x.to(torch.int8)

    idx, dbl, small = poptorch.inferenceModel(Model())(torch.randn(4, 3))
    assert idx.dtype == torch.int32
    assert dbl.dtype == torch.float32
    assert small.dtype == torch.int8


def test_int64_input_that_does_not_fit_int32_is_an_error():
    model = poptorch.inferenceModel(torch.nn.Identity())
    with pytest.raises(poptorch.Error, match="does not fit torch.int32"):
        model(torch.tensor([2**40]))
    # Once compiled, each call's inputs are checked too, by position.
    model(torch.tensor([1]))
    with pytest.raises(poptorch.Error, match=r"^Input 0 of dtype torch.int64 "
                       r"holds the value 1099511627776, which does not fit "
                       r"torch.int32 \(range \[-2147483648, 2147483647\]\)"):
        model(torch.tensor([2**40]))


def test_int64_output_that_does_not_fit_int32_is_an_error():
    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 1, (x * 3e9).to(torch.int64)

    with pytest.raises(poptorch.Error, match=r"^Output 1 of dtype torch.int64 "
                       r"holds the value 3000000000, which does not fit "
                       r"torch.int32"):
        poptorch.inferenceModel(Model())(torch.ones(2))


def test_model_sees_demoted_dtypes():
    seen = {}

    class Model(torch.nn.Module):
        def forward(self, a, b):
            seen["dtypes"] = (a.dtype, b.dtype)
            return a + 1, b * 2

    a, b = poptorch.inferenceModel(Model())(torch.arange(4),
                                            torch.ones(4, dtype=torch.float64))
    assert seen["dtypes"] == (torch.int32, torch.float32)
    torch.testing.assert_close(a, torch.arange(1, 5, dtype=torch.int32))


def test_indivisible_batch_is_an_assertion():
    opts = poptorch.Options().deviceIterations(3)
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    with pytest.raises(AssertionError, match=(
            r"^Invalid batch dimension: In the input torch.Size\(\[4, 2\]\), "
            r"the batch dimension \(4\) must be a multiple of "
            r"Options.deviceIterations\(3\) \* \(Options.replicationFactor"
            r"\(1\) / Options.inputReplicaGrouping.input_group_size\(1\)\) "
            r"\* Options.Training.gradientAccumulation\(1\) = 3 because it is "
            r"used to calculate the batch size which will be executed on the "
            r"device in any given iteration. For a full explanation see the "
            r"batching semantics page of the PopTorch documentation.$")):
        model(torch.randn(4, 2))


class _Scaled(torch.nn.Module):
    def forward(self, x, scale):
        return x * scale


def test_a_0_dim_input_counts_as_a_batch_of_one():
    """A 0-dim tensor is not split: it passes when one micro-batch is
    consumed per call, and is an indivisible batch of 1 otherwise."""
    x, scale = torch.randn(4, 2), torch.tensor(3.0)
    out = poptorch.inferenceModel(_Scaled())(x, scale)
    torch.testing.assert_close(out, x * scale)
    opts = poptorch.Options().deviceIterations(2)
    with pytest.raises(AssertionError, match=r"In the input torch.Size\(\[\]\), "
                       r"the batch dimension \(1\) must be a multiple of "
                       r"Options.deviceIterations\(2\)"):
        poptorch.inferenceModel(_Scaled(), opts)(x, scale)


def test_replicas_read_their_input_group():
    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 1

    opts = poptorch.Options().replicationFactor(4)
    opts.inputReplicaGrouping(2, poptorch.CommGroupType.Consecutive)
    x = torch.arange(4.).reshape(2, 2)
    out = poptorch.inferenceModel(Model(), opts)(x)
    # Replicas 0,1 read group 0 and replicas 2,3 read group 1.
    torch.testing.assert_close(out, x[[0, 0, 1, 1]])
    opts = poptorch.Options().replicationFactor(4)
    opts.inputReplicaGrouping(2, poptorch.CommGroupType.Orthogonal)
    out = poptorch.inferenceModel(Model(), opts)(x)
    torch.testing.assert_close(out, x[[0, 1, 0, 1]])


@pytest.mark.parametrize("mode", [poptorch.OutputMode.All,
                                  poptorch.OutputMode.Final,
                                  poptorch.OutputMode.EveryN])
def test_outputs_never_alias_inputs(mode):
    class Identity(torch.nn.Module):
        def forward(self, x):
            return x

    opts = poptorch.Options().deviceIterations(1 if mode ==
                                               poptorch.OutputMode.All else 2)
    opts.outputMode(mode, 2 if mode == poptorch.OutputMode.EveryN else None)
    x = torch.ones(2, 3)
    out = poptorch.inferenceModel(Identity(), opts)(x)
    out.zero_()
    torch.testing.assert_close(x, torch.ones(2, 3))
