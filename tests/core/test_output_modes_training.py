"""Output modes of a training model with gradient accumulation and
replication, against the per-micro-batch outputs of an eager loop.

PopTorch's rule (over the ``[D][G][R]`` micro-batch order of one call):
All keeps every micro-batch, Final each replica's last one (last
accumulation step of the last device iteration), Sum each replica's sum
over its ``D x G`` micro-batches, EveryN the positions ``N-1, 2N-1, ...``
of the flattened ``D x G`` sequence, for every replica.
"""
import copy

import pytest
import torch

import poptorch
from ._eager import train_call
from ._models import MLP

Mode = poptorch.OutputMode


def _combine(parts):
    """PopTorch's concatenation: 0-dim parts become length 1 when more
    than one part is returned."""
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p.reshape(1) if p.dim() == 0 else p for p in parts])


def _expected(micro, mode, period, index):
    """Output ``index`` of the call from the eager outputs
    ``micro[d][g][r]``."""
    D, G, R = len(micro), len(micro[0]), len(micro[0][0])
    sequence = [micro[d][g] for d in range(D) for g in range(G)]
    if mode == Mode.All:
        kept = sequence
    elif mode == Mode.Final:
        kept = sequence[-1:]
    elif mode == Mode.EveryN:
        kept = sequence[period - 1::period]
    else:  # Sum, per replica
        return _combine([sum(step[r][index] for step in sequence)
                         for r in range(R)])
    return _combine([step[r][index] for step in kept for r in range(R)])


MODES = [(Mode.All, None), (Mode.Final, None), (Mode.Sum, None),
         (Mode.EveryN, 1), (Mode.EveryN, 2), (Mode.EveryN, 3)]
MODE_IDS = ["All", "Final", "Sum", "Every1", "Every2", "Every3"]


@pytest.mark.parametrize("D,G,R", [(3, 2, 1), (2, 3, 2), (1, 6, 2)])
@pytest.mark.parametrize("mode,period", MODES, ids=MODE_IDS)
def test_training_outputs_match_eager_micro_batches(D, G, R, mode, period):
    torch.manual_seed(D * 100 + G * 10 + R)
    model = MLP()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
    opts.Training.gradientAccumulation(G)
    opts.outputMode(mode, period)
    ipu_model = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):  # the second call starts from trained weights
        n = 2 * D * G * R
        x, y = torch.randn(n, 4, generator=gen), torch.randn(n, 3,
                                                            generator=gen)
        out, loss = ipu_model(x, y)
        micro = train_call(reference, ref_opt, (x, y), D, G, R)
        torch.testing.assert_close(out, _expected(micro, mode, period, 0),
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loss, _expected(micro, mode, period, 1),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,period", MODES, ids=MODE_IDS)
def test_inference_outputs_per_replica(mode, period):
    """Inference with D=6 and R=2: every replica's micro-batches."""
    torch.manual_seed(2)
    model = torch.nn.Linear(4, 3)
    opts = poptorch.Options().deviceIterations(6).replicationFactor(2)
    opts.outputMode(mode, period)
    x = torch.randn(6 * 2 * 2, 4)
    out = poptorch.inferenceModel(model, opts)(x)
    chunks = x.chunk(12)
    micro = [[[(model(chunks[d * 2 + r]).detach(),) for r in range(2)]]
             for d in range(6)]
    torch.testing.assert_close(out, _expected(micro, mode, period, 0))
