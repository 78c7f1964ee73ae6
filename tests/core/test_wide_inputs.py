"""int64 index inputs that the graph only widens back to int64 skip the
int32 round trip: which inputs qualify, and that results, errors and the
caller's tensors are exactly as with the round trip."""
import copy

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch
from poptorch_core._executor.backends.passes.wide_inputs import \
    only_widened_inputs

_I32 = torch.int32


def _widened(fn, *inputs, num_inputs=None, pre_dispatch=True):
    # pre_dispatch keeps ``aten::to`` (as the executor's capture does);
    # without it ``to`` becomes ``_to_copy``.
    gm = make_fx(fn, pre_dispatch=pre_dispatch)(*inputs)
    return only_widened_inputs(gm.graph, num_inputs or len(inputs))


@pytest.mark.parametrize("pre_dispatch", [True, False])
def test_views_then_a_widening_qualify(pre_dispatch):
    idx = torch.zeros(2, 5, dtype=_I32)

    def through_views(w, idx):
        src, _ = idx.unbind()
        src = src.reshape(-1).to(torch.int64)
        dst = idx[1].view(-1, 1).expand(5, 3).to(torch.int64)
        return w.index_select(0, src), torch.zeros(4, 3).scatter_add(
            0, dst, torch.ones(5, 3))

    assert _widened(through_views, torch.ones(4, 2), idx, num_inputs=1,
                    pre_dispatch=pre_dispatch) == [0]


@pytest.mark.parametrize("fn", [
    # arithmetic sees int32 values (and int32 overflow)
    lambda w, idx: w.index_select(0, (idx[0] + 1).to(torch.int64)),
    # index_select takes int32 indices as they are
    lambda w, idx: w.index_select(0, idx[0]),
    # the input (or a view of it) is returned
    lambda w, idx: (w.index_select(0, idx[0].to(torch.int64)), idx),
    lambda w, idx: (w.index_select(0, idx[0].to(torch.int64)), idx[1]),
    # the widened value is returned: it would alias the caller's tensor
    lambda w, idx: idx[0].to(torch.int64),
    # the widened value is written: it would write the caller's tensor
    lambda w, idx: w.index_select(0, idx[0].to(torch.int64).add_(1)),
    # the input itself is written
    lambda w, idx: w.index_select(0, idx.add_(1)[0].to(torch.int64)),
    # narrowed further: int16 is observable
    lambda w, idx: w.index_select(0, idx[0].to(torch.int16).long()),
    # reinterpreted bits differ between int32 and int64
    lambda w, idx: w.index_select(
        0, idx.view(torch.int16)[0, :5].to(torch.int64)),
])
def test_anything_else_does_not_qualify(fn):
    idx = torch.zeros(2, 5, dtype=_I32)
    assert _widened(fn, torch.ones(4, 2), idx, num_inputs=1) == []


def test_only_int32_inputs_are_considered():
    assert _widened(lambda x: x.to(torch.int64) * 2,
                    torch.zeros(3, dtype=torch.int16)) == []
    assert _widened(lambda x: x.to(torch.int64) * 2,
                    torch.zeros(3, dtype=_I32)) == [0]


class _Gnn(torch.nn.Module):
    """Embedding of categorical node features, one sum aggregation over
    edges and a pooled loss: every index input only widens."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.lin = torch.nn.Linear(8, 1)

    def forward(self, x, edge_index, batch, y):
        h = self.emb(x)
        src, dst = edge_index.long()
        msg = h.index_select(0, src)
        h = h + torch.zeros_like(h).index_add(0, dst, msg)
        out = h.new_zeros(3, 1).index_add(0, batch.long(),
                                          self.lin(h)).squeeze(-1)
        loss = ((out - y) ** 2).mean()
        return out, poptorch.identity_loss(loss, reduction="none")


def _inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 10, (12,), generator=gen),
            torch.randint(0, 12, (2, 20), generator=gen),
            torch.arange(12) // 4, torch.randn(3, generator=gen))


def _train(model, steps, wide):
    ipu_model = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01))
    ipu_model(*_inputs(0))
    if not wide:
        ipu_model._state.program.wide_inputs = frozenset()
    outs = [ipu_model(*_inputs(seed)) for seed in range(1, steps)]
    return ipu_model, outs


def test_training_is_bit_identical_to_the_round_trip():
    torch.manual_seed(0)
    model = _Gnn()
    wide_model, wide_outs = _train(copy.deepcopy(model), 6, wide=True)
    narrow_model, narrow_outs = _train(copy.deepcopy(model), 6, wide=False)
    assert wide_model._state.program.wide_inputs == {0, 1, 2}
    for (a_out, a_loss), (b_out, b_loss) in zip(wide_outs, narrow_outs):
        assert torch.isfinite(a_out).all()
        assert torch.equal(a_out, b_out) and torch.equal(a_loss, b_loss)
    assert not torch.equal(wide_outs[0][0], wide_outs[-1][0])  # it trains
    wide_model.copyWeightsToHost()
    narrow_model.copyWeightsToHost()
    for a, b in zip(wide_model.model.parameters(),
                    narrow_model.model.parameters()):
        assert torch.equal(a, b)


def test_inputs_are_still_range_checked_and_left_untouched():
    torch.manual_seed(0)
    model = _Gnn()
    ipu_model = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    inputs = _inputs(0)
    kept = [t.clone() for t in inputs]
    ipu_model(*inputs)
    assert ipu_model._state.program.wide_inputs == {0, 1, 2}
    assert all(torch.equal(a, b) and a.dtype == b.dtype
               for a, b in zip(inputs, kept))
    x, edge_index, batch, y = _inputs(1)
    with pytest.raises(poptorch.Error, match="does not fit torch.int32"):
        ipu_model(x, edge_index, batch + 2**31, y)


def test_int32_host_inputs_keep_their_path():
    x, edge_index, batch, y = _inputs(0)
    model = _Gnn()
    ipu_model = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    ipu_model(x.int(), edge_index.int(), batch, y)
    assert ipu_model._state.program.wide_inputs == {2}
