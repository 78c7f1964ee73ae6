"""poptorch_geometric.ops.torch_scatter (what replaces the optional
torch_scatter package while a model is traced) against brute-force loops,
and against torch_scatter itself when it is installed."""
import pytest
import torch

from poptorch_geometric.ops import torch_scatter as ts

INDEX = [0, 3, 0, 1, 3, 3]   # groups 2 and 4 are empty
SIZE = 5


def _groups(src, dim):
    """{group: [slices of src along dim]} from INDEX."""
    groups = {g: [] for g in range(SIZE)}
    for position, g in enumerate(INDEX):
        groups[g].append(src.select(dim, position))
    return groups


def _reference(src, dim, reduce):
    out = []
    for g, items in _groups(src, dim).items():
        if not items:
            empty = torch.ones_like(src.select(dim, 0)) if reduce == "mul" \
                else torch.zeros_like(src.select(dim, 0))
            out.append(empty)
            continue
        stacked = torch.stack(items)
        out.append({"sum": stacked.sum(0), "mean": stacked.mean(0),
                    "mul": stacked.prod(0), "max": stacked.max(0).values,
                    "min": stacked.min(0).values,
                    "std": stacked.std(0, unbiased=True) if len(items) > 1
                    else torch.zeros_like(items[0]),
                    "logsumexp": stacked.logsumexp(0)}[reduce])
    return torch.stack(out, dim)


@pytest.fixture(params=[(0, (6, 3)), (-1, (2, 6))], ids=["dim0", "dim-1"])
def src_dim(request):
    dim, shape = request.param
    gen = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=gen), dim


@pytest.mark.parametrize("reduce", ["sum", "mean", "mul", "max", "min"])
def test_scatter_equals_a_loop(src_dim, reduce):
    src, dim = src_dim
    out = ts.scatter(src, torch.tensor(INDEX), dim, dim_size=SIZE,
                     reduce=reduce)
    torch.testing.assert_close(out, _reference(src, dim, reduce))


def test_arg_max_and_min_are_first_positions(src_dim):
    src, dim = src_dim
    src = src.round()   # ties
    for fn, pick in ((ts.scatter_max, max), (ts.scatter_min, min)):
        _, arg = fn(src, torch.tensor(INDEX), dim, dim_size=SIZE)
        moved = src.movedim(dim, 0)
        for g in range(SIZE):
            positions = [p for p, i in enumerate(INDEX) if i == g]
            for c in range(moved.size(1)):
                got = arg.movedim(dim, 0)[g, c].item()
                if not positions:
                    assert got == src.size(dim)
                    continue
                best = pick(moved[p, c].item() for p in positions)
                assert got == next(p for p in positions
                                   if moved[p, c].item() == best)


def test_std_and_logsumexp_equal_a_loop(src_dim):
    src, dim = src_dim
    index = torch.tensor(INDEX)
    std = ts.scatter_std(src, index, dim, dim_size=SIZE)
    expected = _reference(src, dim, "std")
    counts = torch.bincount(index, minlength=SIZE)
    single = (counts <= 1).view((-1, 1) if dim == 0 else (1, -1))
    # torch_scatter divides by count - 1 + 1e-6: compare the multi groups.
    torch.testing.assert_close(std.masked_fill(single, 0),
                               expected.masked_fill(single, 0), rtol=1e-4,
                               atol=1e-5)
    torch.testing.assert_close(
        ts.scatter_logsumexp(src, index, dim, dim_size=SIZE),
        _reference(src, dim, "logsumexp").masked_fill(
            (counts == 0).view((-1, 1) if dim == 0 else (1, -1)), 0))


def test_softmax_and_log_softmax_equal_a_loop(src_dim):
    src, dim = src_dim
    index = torch.tensor(INDEX)
    soft = ts.scatter_softmax(src, index, dim, dim_size=SIZE)
    log_soft = ts.scatter_log_softmax(src, index, dim, dim_size=SIZE)
    for g, _ in _groups(src, dim).items():
        positions = torch.tensor([p for p, i in enumerate(INDEX) if i == g],
                                 dtype=torch.long)
        if len(positions) == 0:
            continue
        group = src.index_select(dim, positions)
        torch.testing.assert_close(soft.index_select(dim, positions),
                                   group.softmax(dim))
        torch.testing.assert_close(log_soft.index_select(dim, positions),
                                   group.log_softmax(dim))


def test_segment_csr_equals_a_loop():
    src = torch.randn(7, 2)
    indptr = torch.tensor([0, 2, 2, 5])   # the last 2 rows are outside
    out = ts.segment_csr(src, indptr, reduce="sum")
    expected = torch.stack([src[0:2].sum(0), torch.zeros(2),
                            src[2:5].sum(0)])
    torch.testing.assert_close(out, expected)


def test_without_dim_size_the_index_sets_the_size():
    src, index = torch.randn(4, 2), torch.tensor([0, 3, 3, 1])
    for name in ("scatter_sum", "scatter_mean", "scatter_logsumexp"):
        fn = getattr(ts, name)
        torch.testing.assert_close(fn(src, index, 0),
                                   fn(src, index, 0, dim_size=4))


def test_equals_torch_scatter_when_installed(src_dim):
    torch_scatter = pytest.importorskip(
        "torch_scatter",
        reason="torch_scatter (the optional [scatter] extra) is not "
               "installed")
    src, dim = src_dim
    index = torch.tensor(INDEX)
    for name in ("scatter_sum", "scatter_mean", "scatter_mul",
                 "scatter_std", "scatter_logsumexp"):
        torch.testing.assert_close(
            getattr(ts, name)(src, index, dim, dim_size=SIZE),
            getattr(torch_scatter, name)(src, index, dim, dim_size=SIZE))
    for name in ("scatter_max", "scatter_min"):
        ours = getattr(ts, name)(src, index, dim, dim_size=SIZE)
        ref = getattr(torch_scatter, name)(src, index, dim, dim_size=SIZE)
        torch.testing.assert_close(ours[0], ref[0])
        assert torch.equal(ours[1], ref[1])
