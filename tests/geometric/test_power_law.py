"""The power-law graph generator: exact sizes, simple graph, determinism,
a heavy-tailed degree distribution, learnable labels."""
import numpy as np
import pytest
import torch

from poptorch_geometric.datasets import power_law_graph


def test_exact_counts_no_loops_no_duplicates_sorted():
    data = power_law_graph(num_nodes=5000, num_edges=40000, seed=1)
    src, dst = data.edge_index
    assert data.num_nodes == 5000 and data.num_edges == 40000
    assert int(data.edge_index.min()) >= 0
    assert int(data.edge_index.max()) < 5000
    assert not bool((src == dst).any())
    keys = src * 5000 + dst
    assert keys.unique().numel() == 40000
    assert bool((keys[1:] > keys[:-1]).all())


def test_same_seed_same_graph_other_seed_other_graph():
    a = power_law_graph(2000, 9000, seed=3)
    b = power_law_graph(2000, 9000, seed=3)
    c = power_law_graph(2000, 9000, seed=4)
    for key in ("edge_index", "x", "y"):
        assert torch.equal(a[key], b[key])
    assert not torch.equal(a.edge_index, c.edge_index)


def test_degrees_follow_a_power_law():
    """The tail of the in-degree distribution falls like d^-(exponent - 1)
    (complementary CDF), fitted on degrees 10..100."""
    exponent = 2.5
    data = power_law_graph(200_000, 1_000_000, exponent=exponent, seed=0)
    degree = np.bincount(data.edge_index[1].numpy(), minlength=200_000)
    assert degree.max() > 50 * degree.mean()   # hubs exist
    points = np.arange(10, 101)
    ccdf = np.array([(degree >= d).mean() for d in points])
    slope = np.polyfit(np.log(points), np.log(ccdf), 1)[0]
    assert slope == pytest.approx(-(exponent - 1), abs=0.3)


def test_labels_are_a_function_of_the_features():
    data = power_law_graph(3000, 6000, num_features=8, num_classes=4)
    assert data.x.shape == (3000, 8) and data.x.dtype == torch.float32
    assert set(data.y.unique().tolist()) <= {0, 1, 2, 3}
    # A linear classifier fits them (they are an arg-max of x @ W).
    weight = torch.linalg.lstsq(
        data.x, torch.nn.functional.one_hot(data.y).float()).solution
    accuracy = ((data.x @ weight).argmax(1) == data.y).float().mean()
    assert accuracy > 0.6


def test_without_features_and_bad_arguments():
    data = power_law_graph(100, 300, num_features=0, num_classes=0)
    assert "x" not in data and "y" not in data
    with pytest.raises(ValueError, match="exponent"):
        power_law_graph(100, 300, exponent=2.0)
    with pytest.raises(ValueError, match="num_edges"):
        power_law_graph(10, 60)
    with pytest.raises(ValueError, match="num_nodes"):
        power_law_graph(1, 0)
