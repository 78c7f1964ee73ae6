"""Adam-family groups packed into flat buffers (``optim/_packed.py``): the
fast path must be invisible, i.e. bit for bit the per-parameter path, and
must step aside whenever a step or a state load breaks its invariant."""
import copy

import pytest
import torch

from poptorch_core.optim import _device

from .test_optim_device import P, T, _assert_same_params, _batches, \
    _loss, _model, _on_device, _train_device


def _two_groups(params, **kwargs):
    params = list(params)
    return [{"params": params[:2], **kwargs}, {"params": params[2:]}]


FACTORIES = {
    "adam": lambda p: P.Adam(p, lr=0.01),
    "adam_l2": lambda p: P.Adam(p, lr=0.01, weight_decay=0.1),
    "adamw": lambda p: P.AdamW(p, lr=0.01, weight_decay=0.1),
    "adamw_no_bias": lambda p: P.AdamW(p, lr=0.01, bias_correction=False),
    "adam_two_groups": lambda p: P.Adam(_two_groups(p, lr=0.05), lr=0.01),
    "torch_adam": lambda p: T.Adam(p, lr=0.01),
}


def _unpacked(monkeypatch):
    monkeypatch.setattr(_device.PackedGroup, "pack",
                        classmethod(lambda cls, *args: None))


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_packed_step_is_bit_identical_to_the_per_parameter_path(
        name, monkeypatch):
    factory, batches = FACTORIES[name], _batches()
    host = _model()
    packed_model, packed_opt = _on_device(host, factory(host.parameters()))
    _train_device(packed_model, packed_opt, batches, micro_batches=2)
    assert packed_opt._packed and all(packed_opt._packed), \
        "the fast path was not taken"

    _unpacked(monkeypatch)
    plain_model, plain_opt = _on_device(host, factory(host.parameters()))
    _train_device(plain_model, plain_opt, batches, micro_batches=2)
    assert not any(plain_opt._packed), "the per-parameter path was not taken"
    _assert_same_params(packed_model, plain_model, rtol=0, atol=0)
    packed_state = packed_opt.read_state()["ipu_state"]
    for key, value in plain_opt.read_state()["ipu_state"].items():
        assert torch.equal(packed_state[key], value), key


def test_parameters_keep_their_identity_and_share_one_buffer():
    host = _model()
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.1))
    before = [id(p) for p in dev_model.parameters()]
    _train_device(dev_model, dev_opt, _batches(n=1))
    flat = dev_opt._packed[0].param
    assert [id(p) for p in dev_model.parameters()] == before
    for p in dev_model.parameters():
        assert p.is_leaf and p.requires_grad
        assert p.untyped_storage().data_ptr() == \
            flat.untyped_storage().data_ptr()
    # The flat buffer is the weights: a change through it is visible.
    with torch.no_grad():
        flat.zero_()
    assert all(not p.any() for p in dev_model.parameters())


def test_a_step_missing_some_gradients_leaves_the_fast_path_and_matches_torch():
    batches = _batches(n=5)
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.05))
    ref_opt = T.Adam(ref.parameters(), lr=0.05, foreach=False)

    def train(model, step):
        for i, (x, y) in enumerate(batches):
            if i == 2:  # only the first layer takes part in this step
                loss = model[0](x).pow(2).mean()
            else:
                loss = _loss(model, x, y)
            step(loss)

    def dev_step(loss):
        loss.backward()
        dev_opt.step(1)

    def ref_step(loss):
        ref_opt.zero_grad()
        loss.backward()
        ref_opt.step()

    train(dev_model, dev_step)
    train(ref, ref_step)
    _assert_same_params(dev_model, ref)
    steps = dev_opt.read_state()["ipu_state"]
    assert steps["Step___0.weight"].item() == 5
    assert steps["Step___2.weight"].item() == 4


def test_state_loaded_into_a_packed_optimizer_takes_effect():
    batches = _batches(n=6)
    host = _model()
    dev_a, opt_a = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    _train_device(dev_a, opt_a, batches[:3])
    state = opt_a.read_state()["ipu_state"]
    host_b = copy.deepcopy(dev_a)
    dev_b, opt_b = _on_device(host_b, P.Adam(host_b.parameters(), lr=0.01))
    # B packs itself on its own first step, then receives A's state and
    # weights: it must continue exactly like A.
    _train_device(dev_b, opt_b, batches[:1])
    assert opt_b._packed is not None
    opt_b.write_state(state)
    with torch.no_grad():
        for pa, pb in zip(dev_a.parameters(), dev_b.parameters()):
            pb.copy_(pa)
    _train_device(dev_a, opt_a, batches[3:])
    _train_device(dev_b, opt_b, batches[3:])
    _assert_same_params(dev_a, dev_b, rtol=0, atol=0)


def test_clipping_uses_the_per_parameter_path_and_still_clips():
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(
        host, P.Adam(host.parameters(), lr=0.05, max_grad_norm=0.01))
    ref_opt = T.Adam(ref.parameters(), lr=0.05)
    for x, y in _batches():
        (_loss(dev_model, x, y)).backward()
        dev_opt.step(1)
        ref_opt.zero_grad()
        _loss(ref, x, y).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.01)
        ref_opt.step()
    _assert_same_params(dev_model, ref)


def test_an_unused_parameter_does_not_repack_every_step(monkeypatch):
    """A parameter that never gets a gradient makes the first step drop the
    packing; after that its group stays on the per-parameter path instead of
    being packed again and again."""
    packs = []
    original = _device.PackedGroup.pack.__func__
    monkeypatch.setattr(_device.PackedGroup, "pack", classmethod(
        lambda cls, *args: packs.append(1) or original(cls, *args)))
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.05))
    ref_opt = T.Adam(ref.parameters(), lr=0.05, foreach=False)
    for x, y in _batches():
        dev_model[0](x).pow(2).mean().backward()
        dev_opt.step(1)
        ref_opt.zero_grad()
        ref[0](x).pow(2).mean().backward()
        ref_opt.step()
    _assert_same_params(dev_model, ref)
    assert len(packs) == 2  # packed once, dropped, found unpackable once


def _frozen_run(unfreeze_at=None, two_groups=False):
    """Trains with the first layer frozen (unfrozen before step
    ``unfreeze_at``) on the device and with torch's Adam."""
    host, ref = _model(), _model()
    for model in (host, ref):
        model[0].requires_grad_(False)

    def groups(model):
        if not two_groups:
            return model.parameters()
        return [{"params": model[0].parameters()},
                {"params": model[2].parameters()}]

    dev_model, dev_opt = _on_device(host, P.Adam(groups(host), lr=0.05))
    ref_opt = T.Adam(groups(ref), lr=0.05, foreach=False)
    frozen = dev_model[0].weight.detach().clone()
    for i, (x, y) in enumerate(_batches(n=6)):
        if i == unfreeze_at:
            dev_model[0].requires_grad_(True)
            ref[0].requires_grad_(True)
        _loss(dev_model, x, y).backward()
        dev_opt.step(1)
        ref_opt.zero_grad()
        _loss(ref, x, y).backward()
        ref_opt.step()
    _assert_same_params(dev_model, ref)
    return dev_model, dev_opt, frozen


@pytest.mark.parametrize("two_groups", [False, True])
def test_frozen_parameters_stay_on_the_fast_path(monkeypatch, two_groups):
    packs = []
    original = _device.PackedGroup.pack.__func__
    monkeypatch.setattr(_device.PackedGroup, "pack", classmethod(
        lambda cls, *args: packs.append(1) or original(cls, *args)))
    dev_model, dev_opt, frozen = _frozen_run(two_groups=two_groups)
    assert torch.equal(dev_model[0].weight, frozen)
    # Built once, never dropped: one pack per group.
    assert len(packs) == (2 if two_groups else 1)
    trained = [p for p in dev_opt._packed if p is not None]
    assert len(trained) == 1 and len(trained[0].params) == 2


def test_unfreezing_falls_back_and_still_matches_torch():
    dev_model, dev_opt, frozen = _frozen_run(unfreeze_at=3)
    assert not torch.equal(dev_model[0].weight, frozen)
    steps = dev_opt.read_state()["ipu_state"]
    assert steps["Step___0.weight"].item() == 3
    assert steps["Step___2.weight"].item() == 6


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_fused_packed_step_matches_the_per_parameter_path(name, monkeypatch):
    """With ``fused_update`` (the ``compile`` backend), Adam and AdamW
    groups step with torch's fused kernel: equal to the per-parameter rule
    within float rounding. Kinds no fused kernel computes (AdamW without
    bias correction) keep the rule, bit for bit."""
    from poptorch_core.optim import _packed
    calls = []
    for kind, kernel in list(_packed._FUSED_KERNELS.items()):
        def counted(*args, _kernel=kernel, **kwargs):
            calls.append(1)
            return _kernel(*args, **kwargs)
        monkeypatch.setitem(_packed._FUSED_KERNELS, kind, counted)
    factory, batches = FACTORIES[name], _batches()
    host = _model()
    fused_model, fused_opt = _on_device(host, factory(host.parameters()))
    fused_opt.fused_update = True
    _train_device(fused_model, fused_opt, batches, micro_batches=2)
    assert fused_opt._packed and all(fused_opt._packed)
    exact = name == "adamw_no_bias"
    assert (calls == []) == exact

    _unpacked(monkeypatch)
    plain_model, plain_opt = _on_device(host, factory(host.parameters()))
    _train_device(plain_model, plain_opt, batches, micro_batches=2)
    tolerance = {"rtol": 0, "atol": 0} if exact else \
        {"rtol": 1e-5, "atol": 1e-7}
    _assert_same_params(fused_model, plain_model, **tolerance)
    fused_state = fused_opt.read_state()["ipu_state"]
    for key, value in plain_opt.read_state()["ipu_state"].items():
        torch.testing.assert_close(fused_state[key], value, **tolerance,
                                   msg=key)
