"""The ``compile`` backend copies a ``cat`` input that inductor updates in
place (``passes.cat_copies``): the updated value is read after its ``cat``, and
without the copy a later buffer took the cat's memory first. Each test
compares with the same computation run eagerly."""
import copy

import pytest
import torch
import torch._inductor.config
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch
from poptorch_core._executor.backends.passes import cat_copies
from poptorch_core._executor.backends.executable import \
    _compile_with_inductor


def _fresh(threads: int = 2):
    """No inductor cache (it would skip the lowering that the patch
    changes), and two threads unless said otherwise: then inductor calls
    ATen for scatter-sums, as where PNA's gradients were NaN. With one it
    writes its own scatter kernel, which lost the cat's memory as well."""
    return torch._inductor.config.patch({"fx_graph_cache": False,
                                         "cpp.threads": threads})


def _amax(x, index, rows):
    column = index.view(-1, 1).expand_as(x)
    return x.new_zeros(rows, x.shape[1]).scatter_reduce(
        0, column, x, "amax", include_self=False)


def _scatter_sum(x, index, rows):
    return x.new_zeros(rows, x.shape[1]).scatter_add(
        0, index.view(-1, 1).expand_as(x), x)


def _two_layers(aggregate):
    """Two layers that each concatenate an aggregate with a second copy of
    it: the second layer's ``cat`` is the size of the first, and the first
    aggregate is read again at the end."""

    def layers(x, index, w1, w2):
        first = aggregate(x, index, 4)
        h = torch.cat([first, first * 2], -1) @ w1
        second = aggregate(h[index], index, 4)
        out = torch.cat([second, second * 3], -1) @ w2
        return out + first,

    return layers


@pytest.mark.parametrize("aggregate,threads", [
    # a call of ATen's scatter, on any number of threads
    (_amax, 2),
    # inductor's own scatter kernel
    (_scatter_sum, 1),
    # a call of ATen's scatter, which the backend writes as its row loop
    (_scatter_sum, 2)])
def test_an_aggregate_read_after_its_cat_keeps_its_values(aggregate,
                                                          threads):
    x, index = torch.randn(6, 8), torch.tensor([0, 1, 2, 2, 3, 3])
    w1, w2 = torch.randn(16, 8), torch.randn(16, 8)
    fn = _two_layers(aggregate)
    before = cat_copies.copied()
    with _fresh(threads):
        compiled = _compile_with_inductor(make_fx(fn)(x, index, w1, w2),
                                          [x, index, w1, w2])
    torch.testing.assert_close(compiled(x, index, w1, w2)[0],
                               fn(x, index, w1, w2)[0])
    # Both aggregates are updated in place and concatenated.
    assert cat_copies.copied() - before == 2


class _MaxAndStd(torch.nn.Module):
    """PNA's layer in plain PyTorch, twice: a message from both ends of each
    edge, its max and its standard deviation at the receiving node,
    concatenated, scaled by a node weight and concatenated again, then a
    linear layer. The max's backward pass reads the maxima again (it
    counts the messages equal to each) after the next layer's ``cat``."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.width = width
        self.pre = torch.nn.Linear(width, width)
        self.messages = torch.nn.ModuleList(
            torch.nn.Linear(2 * width, width) for _ in range(2))
        self.posts = torch.nn.ModuleList(
            torch.nn.Linear(5 * width, width) for _ in range(2))

    def forward(self, x, edge_index, scale, target):
        h = self.pre(x)
        src, dst = edge_index
        column = dst.view(-1, 1).expand(-1, self.width)
        count = torch.zeros(x.shape[0]).index_add(
            0, dst, torch.ones(dst.shape[0])).clamp(min=1).view(-1, 1)
        for message, post in zip(self.messages, self.posts):
            m = message(torch.cat([h.index_select(0, dst),
                                   h.index_select(0, src)], -1))
            maxima = torch.zeros_like(h).scatter_reduce(
                0, column, m, "amax", include_self=False)
            mean = torch.zeros_like(h).scatter_add(0, column, m) / count
            squares = torch.zeros_like(h).scatter_add(0, column, m * m)
            std = (squares / count - mean * mean).clamp(min=1e-5).sqrt()
            std = std.masked_fill(std <= 1e-5 ** 0.5, 0.0)
            aggregates = torch.cat([maxima, std], -1)
            scaled = torch.cat([aggregates, aggregates * scale], -1)
            h = post(torch.cat([h, scaled], -1)).relu()
        loss = ((h - target) ** 2).mean()
        return h, poptorch.identity_loss(loss, reduction="none")


def test_a_max_aggregator_trains_as_eager_pytorch():
    """Without the copies, the compiled step's weights were off by up to
    1.5e-3 here (PyG's PNA got NaN gradients)."""
    gen = torch.Generator().manual_seed(0)
    x, target = torch.randn(12, 8, generator=gen), \
        torch.randn(12, 8, generator=gen)
    # Every node but the last two receives messages.
    edge_index = torch.stack([torch.randint(0, 12, (30,), generator=gen),
                              torch.arange(30) % 10])
    inputs = (x, edge_index, torch.rand(12, 1, generator=gen), target)
    model = _MaxAndStd()
    eager = copy.deepcopy(model)
    optimizer = torch.optim.SGD(eager.parameters(), lr=0.5)
    eager(*inputs)[1].backward()
    optimizer.step()

    opts = poptorch.Options()
    opts.Simulator.backend("compile")
    before = cat_copies.copied()
    with _fresh():
        compiled = poptorch.trainingModel(
            model, opts, torch.optim.SGD(model.parameters(), lr=0.5))
        compiled(*inputs)
    compiled.copyWeightsToHost()
    for (name, got), expected in zip(model.named_parameters(),
                                     eager.parameters()):
        torch.testing.assert_close(
            got, expected, rtol=1e-4, atol=1e-5,
            msg=lambda text, name=name: f"{name}: {text}")
    assert cat_copies.copied() - before == 2


def test_the_tag_keys_inductors_caches_inside_the_block_only():
    outer = torch.compiler.config.cache_key_tag
    with cat_copies.copied_cat_inputs():
        tag = torch.compiler.config.cache_key_tag
        with cat_copies.copied_cat_inputs():
            # Nested blocks key the caches as one does.
            assert torch.compiler.config.cache_key_tag == tag
    assert cat_copies.CACHE_TAG in tag and outer in tag
    assert torch.compiler.config.cache_key_tag == outer
