"""Masker interfaces."""
import pytest
import torch

from poptorch_geometric.masker import LayerMasker, Masker, NoMasker, \
    PreLayerMasker

KINDS = ("node", "edge", "graph")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("entries", [torch.ones(3),
                                     (torch.ones(2), torch.zeros(1))])
def test_no_masker_is_identity(kind, entries):
    assert getattr(NoMasker(), f"{kind}_masker")(entries) is entries


@pytest.mark.parametrize("kind", KINDS)
def test_pre_layer_masker_calls_the_layer(kind):
    def layer(a, b):
        return a * 2 + b

    masked = getattr(PreLayerMasker(NoMasker()), f"{kind}_masker")(layer)
    a, b = torch.arange(3.0), torch.ones(3)
    assert torch.equal(masked(a, b), layer(a, b))


def test_abstract():
    with pytest.raises(TypeError, match="Can't instantiate abstract class "
                       "Masker"):
        Masker()
    with pytest.raises(TypeError, match="Can't instantiate abstract class "
                       "LayerMasker"):
        LayerMasker(NoMasker())
