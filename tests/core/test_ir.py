"""Tests of ``poptorch_core.Ir``: graphs, signature binding, streams,
replication settings, replica groupings and DOT output."""
import os
import re
from typing import Dict, List

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch_core as poptorch
from poptorch_core import CommGroupType, Ir, TensorByRef, TensorSpec


# Replica groupings -----------------------------------------------------------
@pytest.mark.parametrize("stride, group_size, expected", [
    (1, 2, [0, 0, 1, 1, 2, 2, 3, 3]),
    (1, 4, [0, 0, 0, 0, 1, 1, 1, 1]),
    (2, 4, [0, 1, 0, 1, 0, 1, 0, 1]),
    (4, 2, [0, 1, 2, 3, 0, 1, 2, 3]),
])
def test_replica_grouping_assignment(stride, group_size, expected):
    rg = Ir(replication=8).replica_grouping(stride, group_size)
    assert rg.assignment == expected
    assert (rg.stride, rg.group_size, rg.num_groups) == (stride, group_size,
                                                         8 // group_size)
    assert rg.is_const


@pytest.mark.parametrize("stride, expected_size", [(1, 8), (2, 4), (4, 2),
                                                   (8, 1)])
def test_replica_grouping_default_group_size(stride, expected_size):
    rg = Ir(replication=8).replica_grouping(stride=stride)
    assert rg.group_size == expected_size
    # Every group holds replicas exactly ``stride`` apart.
    for group in rg.groups:
        assert all(b - a == stride for a, b in zip(group, group[1:]))


def test_replica_grouping_defaults_to_one_group():
    rg = Ir(replication=4).replica_grouping()
    assert rg.assignment == [0, 0, 0, 0]
    assert rg._to_comm_group() == (CommGroupType.All, 4)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(stride=3), ValueError, r"The stride \(3\) must divide the "
     r"replication factor \(8\) when group_size is not given"),
    (dict(stride=2, group_size=3), ValueError,
     r"stride \* group_size \(2 \* 3\) must divide the replication factor"),
    (dict(stride=0), ValueError, "stride must be at least 1, got 0"),
    (dict(stride=1, group_size=0), ValueError,
     "group_size must be at least 1, got 0"),
    (dict(stride=1.5), TypeError, "stride must be an int, not float"),
])
def test_replica_grouping_rejects_bad_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        Ir(replication=8).replica_grouping(**kwargs)


def test_replica_grouping_cannot_be_built_directly():
    with pytest.raises(RuntimeError, match="ir.replica_grouping"):
        poptorch.ReplicaGrouping()


def _spec_groups(comm_type, r, k):
    """Groups as spec section 7.8 defines them for each CommGroupType."""
    if comm_type == CommGroupType.Consecutive:
        return [list(range(g * k, (g + 1) * k)) for g in range(r // k)]
    if comm_type == CommGroupType.Orthogonal:
        m = r // k
        return [list(range(g, r, m)) for g in range(m)]
    if comm_type == CommGroupType.NoGrouping:
        return [[i] for i in range(r)]
    return [list(range(r))]


@pytest.mark.parametrize("stride, group_size", [(1, 2), (1, 4), (2, 4),
                                                (4, 2), (1, 8), (1, 1)])
def test_comm_group_describes_the_same_groups(stride, group_size):
    rg = Ir(replication=8).replica_grouping(stride, group_size)
    comm_type, size = rg._to_comm_group()
    assert sorted(rg.groups) == sorted(_spec_groups(comm_type, 8, size))


def test_assignment_grouping_with_constant_stride_is_const():
    ir = Ir(replication=8)
    rg = ir.replica_grouping_from_assignments([0, 1, 2, 3, 0, 1, 2, 3])
    assert rg.is_const and rg.stride == 4 and rg.group_size == 2
    assert rg == ir.replica_grouping(4, 2)
    assert rg.const_rg.assignment == rg.assignment


def test_non_constant_grouping_is_for_variables_not_collectives():
    ir = Ir(replication=4)
    assignment = [0, 1, 1, 0]
    rg = ir.replica_grouping_from_assignments(assignment)
    assert not rg.is_const
    assert rg.assignment == assignment
    assert rg.groups == [[0, 3], [1, 2]]
    settings = rg._to_variable_settings()
    assert list(settings.assignment) == assignment
    assert settings.num_groups == 2
    with pytest.raises(ValueError, match="collectives"):
        rg._to_comm_group()
    with pytest.raises(ValueError, match="no constant stride"):
        rg.stride
    with pytest.raises(ValueError, match="no constant stride"):
        rg.const_rg


@pytest.mark.parametrize("assignment, error, message", [
    ([0, 0, 1], ValueError, "assignment has 3 entries but the replication "
     "factor is 4: give one group index per replica"),
    ([0, 0, 0, 1], ValueError, r"must have the same size, got group sizes "
     r"\[1, 3\]"),
    ([0, 0, 2, 2], ValueError, "must be 0..num_groups-1 with none missing"),
    ("0011", TypeError, "assignment must be a list of ints"),
    ([0, 0, 1.0, 1], TypeError, "assignment must be a list of ints"),
])
def test_assignment_validation(assignment, error, message):
    with pytest.raises(error, match=message):
        Ir(replication=4).replica_grouping_from_assignments(assignment)


@pytest.mark.parametrize("stride, group_size", [(1, 2), (2, 4), (4, 2),
                                                (2, 2)])
def test_transpose_takes_one_replica_per_group(stride, group_size):
    rg = Ir(replication=8).replica_grouping(stride, group_size)
    transposed = rg.transpose()
    assert transposed.group_size == rg.num_groups
    for group in transposed.groups:
        # One member of every original group, each at the same rank.
        owners = sorted(rg.assignment[r] for r in group)
        assert owners == list(range(rg.num_groups))
        ranks = {rg.groups[rg.assignment[r]].index(r) for r in group}
        assert len(ranks) == 1


def test_transpose_of_consecutive_pairs():
    rg = Ir(replication=8).replica_grouping(1, 2).transpose()
    assert rg.assignment == [0, 1, 0, 1, 0, 1, 0, 1]
    assert rg.is_const and (rg.stride, rg.group_size) == (2, 4)


# Identity, replication, host transfers ---------------------------------------
def test_ir_identity():
    a, b = Ir(), Ir()
    assert a.id != b.id
    assert a == a and a != b
    assert len({a, b, a}) == 2
    assert repr(a) == f"Ir[id={a.id}]"
    with pytest.raises(TypeError, match="Value must be of type poptorch.Ir"):
        a == 1  # pylint: disable=pointless-statement


def test_replication_factor_is_frozen_once_an_executable_exists():
    ir = Ir(replication=2)
    ir.replication_factor = 4
    assert ir.replication_factor == 4
    assert ir.instance_replication_factor == 4
    ir._mark_executable_built()
    with pytest.raises(RuntimeError, match="executable"):
        ir.replication_factor = 8
    assert ir.replication_factor == 4


def test_instance_replication_factor_divides_by_processes():
    ir = Ir(replication=8)
    ir._set_num_instances(2)
    assert ir.instance_replication_factor == 4
    with pytest.raises(ValueError, match=r"The replication factor \(8\) must "
                       r"be a multiple of the number of instances \(3\)"):
        ir._set_num_instances(3)


def test_num_host_transfers():
    ir = Ir()
    assert ir.num_host_transfers == 1
    ir.num_host_transfers = 6
    assert ir.num_host_transfers == 6
    with pytest.raises(ValueError,
                       match="num_host_transfers must be at least 1, got 0"):
        ir.num_host_transfers = 0
    with pytest.raises(TypeError,
                       match="num_host_transfers must be an int, not float"):
        ir.num_host_transfers = 2.0


# create_graph ----------------------------------------------------------------
def test_graph_from_specs_matches_eager():

    def fn(x, w):
        return torch.relu(x @ w) * 2

    ir = Ir()
    graph = ir.create_graph(fn, TensorSpec((3, 4)), TensorSpec((4, 5)))
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(graph(x, w), fn(x, w))
    assert [(i.name, i.shape) for i in graph.inputs] == [("x", (3, 4)),
                                                         ("w", (4, 5))]
    assert graph.outputs[0].shape == (3, 5)


def test_graph_from_real_tensors_runs_on_new_values_and_leaves_args_alone():

    def fn(x):
        x.mul_(10)  # by value: must not reach the caller
        return x + 1

    example = torch.ones(3)
    graph = Ir().create_graph(fn, example)
    torch.testing.assert_close(example, torch.ones(3))
    new = torch.arange(3.0)
    torch.testing.assert_close(graph(new), torch.arange(3.0) * 10 + 1)
    torch.testing.assert_close(new, torch.arange(3.0))


def test_graph_of_a_module_matches_the_module():
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    graph = Ir().create_graph(module, TensorSpec((2, 4)))
    x = torch.randn(2, 4)
    torch.testing.assert_close(graph(x), module(x))
    assert graph.name == "Sequential_subgraph(0)"


def test_graph_of_a_module_runs_its_hooks_and_binds_like_forward():
    module = torch.nn.Linear(2, 2)
    module.register_forward_hook(lambda mod, args, out: out * 0 + 7)
    graph = Ir().create_graph(module, input=TensorSpec((1, 2)))
    assert [i.name for i in graph.inputs] == ["input"]
    torch.testing.assert_close(graph(torch.randn(1, 2)),
                               torch.full((1, 2), 7.0))
    with pytest.raises(ValueError, match="do not match the signature"):
        Ir().create_graph(module, TensorSpec((1, 2)), TensorSpec((1, 2)))


def test_inputs_inside_containers_args_and_kwargs():

    def fn(a, pair, table, *rest, scale=1.0, **extra):
        total = a * scale + pair[0] + pair[1] + table["u"]
        return [total] + list(rest) + [extra["z"] * 2]

    ir = Ir()
    spec = TensorSpec((2, ))
    graph = ir.create_graph(fn, spec, (spec, spec), {"u": spec}, spec,
                            scale=3.0, z=spec)
    assert [i.name for i in graph.inputs] == [
        "a", "pair_0", "pair_1", "table_u", "rest_0", "z"
    ]
    values = [torch.randn(2) for _ in range(6)]
    a, p0, p1, u, r0, z = values
    outputs = graph(*values)
    expected = fn(a, (p0, p1), {"u": u}, r0, scale=3.0, z=z)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        torch.testing.assert_close(got, want)


def test_non_tensor_arguments_are_frozen_constants():
    graph = Ir().create_graph(lambda x, n: x * n, TensorSpec((2, )), 5)
    assert len(graph.inputs) == 1
    torch.testing.assert_close(graph(torch.ones(2)), torch.full((2, ), 5.0))


def test_list_mixing_tensors_and_other_values_is_a_type_error():
    with pytest.raises(TypeError, match="all elements must be tensors"):
        Ir().create_graph(lambda xs: xs[0], [torch.ones(2), 3])


@pytest.mark.parametrize("args, kwargs", [
    ((TensorSpec((2, )), TensorSpec((2, ))), {}),  # too many
    ((), {}),  # missing
    ((TensorSpec((2, )), ), {"unknown": 1}),
])
def test_arguments_that_do_not_match_the_signature(args, kwargs):
    with pytest.raises(ValueError, match="do not match the signature"):
        Ir().create_graph(lambda x: x, *args, **kwargs)


@pytest.mark.parametrize("result", [3, "text", [torch.ones(1), 2]])
def test_callable_must_return_tensors(result):

    def fn(x):
        del x
        return result

    with pytest.raises(ValueError, match="must be None, a Tensor or an "
                       "iterable of Tensors"):
        Ir().create_graph(fn, TensorSpec((1, )))


def test_callable_returning_none_gives_a_graph_without_outputs():

    def fn(x: TensorByRef):
        x.add_(1)

    graph = Ir().create_graph(fn, TensorSpec((2, )))
    assert graph.outputs == ()
    x = torch.zeros(2)
    assert graph(x) is None
    torch.testing.assert_close(x, torch.ones(2))


def test_by_reference_type_hints():

    def fn(ref: TensorByRef, refs: List[TensorByRef],
           named: Dict[str, TensorByRef], val: torch.Tensor):
        for t in [ref, val, *refs, *named.values()]:
            t.add_(1)
        return val

    spec = TensorSpec((2, ))
    graph = Ir().create_graph(fn, spec, [spec], {"k": spec}, spec)
    assert [i.by_ref for i in graph.inputs] == [True, True, True, False]
    ref, ref0, named, val = (torch.zeros(2) for _ in range(4))
    out = graph(ref, ref0, named, val)
    for changed in (ref, ref0, named):
        torch.testing.assert_close(changed, torch.ones(2))
    torch.testing.assert_close(val, torch.zeros(2))
    torch.testing.assert_close(out, torch.ones(2))


def test_graph_call_checks_inputs():
    graph = Ir().create_graph(lambda x: x + 1, TensorSpec((2, )))
    with pytest.raises(ValueError, match="takes 1 input"):
        graph()
    with pytest.raises(ValueError, match="shape"):
        graph(torch.ones(3))
    with pytest.raises(TypeError, match="Input 'x' of graph .* must be a "
                       "torch.Tensor, got list"):
        graph([1.0, 2.0])


def test_graph_names_are_unique_and_drop_dots():

    def fn(x):
        return x

    class Outer:

        @staticmethod
        def method(x):
            return x

    ir = Ir()
    spec = TensorSpec((1, ))
    base = fn.__qualname__.replace(".", "")
    assert ir.create_graph(fn, spec).name == f"{base}_subgraph(0)"
    assert ir.create_graph(fn, spec).name == f"{base}_subgraph(1)"
    method_base = Outer.method.__qualname__.replace(".", "")
    assert method_base.endswith("Outermethod")
    assert ir.create_graph(Outer.method,
                           spec).name == f"{method_base}_subgraph(0)"
    assert [g.name for g in ir.graphs][0] == "main"


def test_create_empty_graph():
    ir = Ir()
    first = ir.create_empty_graph()
    named = ir.create_empty_graph("my.graph")
    assert first.name == "graph_subgraph(0)"
    assert named.name == "mygraph_subgraph(0)"
    assert first.is_empty() and first.inputs == () and first.outputs == ()
    assert first() is None
    assert ir.get_graph(named.name) is named
    with pytest.raises(KeyError, match="has no graph named 'nothing'"):
        ir.get_graph("nothing")


def test_poptorch_ops_take_their_ipu_meaning_in_graphs():
    graph = Ir().create_graph(
        lambda x, s: poptorch.dynamic_slice(x, 0, s, 4, 1), torch.arange(8),
        torch.tensor(0))
    torch.testing.assert_close(graph(torch.arange(8), torch.tensor(6)),
                               torch.tensor([6, 7, 0, 1]))


# Main graph and streams ------------------------------------------------------
def _captured_model():
    """A capture shaped like the executor's: parameter, buffer, two inputs,
    one user output and one internal output."""

    def forward(weight, running, x, ids):
        out = x @ weight + ids.to(x.dtype).unsqueeze(1)
        return out, running + out.mean()

    gm = make_fx(forward)(torch.randn(4, 3), torch.zeros(()),
                          torch.randn(5, 4), torch.zeros(5, dtype=torch.int32))
    kinds = ["parameter", "buffer", "input", "input"]
    for node, kind in zip(
        (n for n in gm.graph.nodes if n.op == "placeholder"), kinds):
        node.meta["poptorch_kind"] = kind
    gm.meta["poptorch_num_user_outputs"] = 1
    return gm


def test_adopted_main_graph_defines_the_streams():
    ir = Ir()
    gm = _captured_model()
    main = ir._adopt_main_graph(gm)
    assert ir.main_graph is main and main.graph_module is gm
    h2d = ir.get_all_h2d_streams()
    assert [(s.shape, s.dtype) for s in h2d] == [((5, 4), torch.float32),
                                                 ((5, ), torch.int32)]
    d2h = ir.get_all_d2h_streams()
    assert [(s.shape, s.dtype) for s in d2h] == [((5, 3), torch.float32)]
    assert len(main.outputs) == 2 and len(main.user_outputs) == 1
    assert [i.kind for i in main.inputs] == [
        "parameter", "buffer", "input", "input"
    ]


def test_declared_streams_are_listed_and_unique():
    ir = Ir()
    ir._adopt_main_graph(_captured_model())
    stream = ir.h2d_stream((2, 2), torch.float16, "extra")
    assert ir.get_all_h2d_streams()[-1] is stream
    assert stream.spec == TensorSpec((2, 2), torch.float16)
    with pytest.raises(ValueError, match="unique"):
        ir.h2d_stream((1, ), torch.float32, "extra")
    out = ir.d2h_stream((3, ), torch.float32)
    assert ir.get_all_d2h_streams()[-1] is out


def test_main_graph_is_empty_before_adoption():
    ir = Ir()
    assert ir.main_graph.is_empty()
    assert ir.get_all_h2d_streams() == [] and ir.get_all_d2h_streams() == []


# DOT -------------------------------------------------------------------------
_NODE = re.compile(
    r'^  "([^"]+)" \[label="((?:[^"\\]|\\.)*)"(, shape=\w+)?\];$')
_EDGE = re.compile(r'^  "([^"]+)" -> "([^"]+)";$')


def _parse_dot(text):
    """Nodes and edges of the DOT subset we write; fails on anything else."""
    lines = text.strip().split("\n")
    assert lines[0].startswith("digraph ") and lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[1:-1]:
        node, edge = _NODE.match(line), _EDGE.match(line)
        if node:
            nodes[node.group(1)] = node.group(2)
        elif edge:
            edges.append(edge.groups())
        else:
            assert re.match(r"^  (label=|labelloc=|node \[)", line), line
    return nodes, edges


def test_dot_checkpoint_writes_one_file_per_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("POPART_DOT_CHECKS", "FWD0:FINAL")
    ir = Ir()
    ir._adopt_main_graph(_captured_model())
    sub = ir.create_graph(lambda x: x.sin() * 2, TensorSpec((2, )))
    paths = ir.dot_checkpoint("FINAL", str(tmp_path))
    # Documented rule: characters outside [A-Za-z0-9_.-] become "_".
    safe_sub = re.sub(r"[^A-Za-z0-9_.-]", "_", sub.name)
    assert [os.path.basename(p) for p in paths] == [
        f"ir{ir.id}_main_FINAL.dot", f"ir{ir.id}_{safe_sub}_FINAL.dot"
    ]
    for graph, path in zip(ir.graphs, paths):
        with open(path, encoding="utf-8") as f:
            nodes, edges = _parse_dot(f.read())
        fx_nodes = list(graph.graph_module.graph.nodes)
        assert set(nodes) == {n.name for n in fx_nodes}
        expected_edges = {(src.name, n.name) for n in fx_nodes
                          for src in n.all_input_nodes}
        assert set(edges) == expected_edges
    nodes, _ = _parse_dot(ir.main_graph.to_dot())
    mm = next(label for name, label in nodes.items() if name.startswith("mm"))
    assert "aten.mm.default" in mm and "float32[5, 3]" in mm


def test_dot_checkpoint_ignores_checks_that_are_not_enabled(
        tmp_path, monkeypatch):
    monkeypatch.setenv("POPART_DOT_CHECKS", "FWD0")
    ir = Ir()
    assert ir.dot_checkpoint("FINAL", str(tmp_path)) == []
    monkeypatch.delenv("POPART_DOT_CHECKS")
    assert ir.dot_checkpoint("FWD0", str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_dot_checkpoint_all_and_default_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("POPART_DOT_CHECKS", "ALL")
    monkeypatch.setenv("POPTORCH_SIM_DOT_DIR", str(tmp_path / "dots"))
    ir = Ir()
    ir.create_empty_graph('odd "name"')
    paths = ir.dot_checkpoint("ANYTHING")
    assert len(paths) == 2
    for path in paths:
        assert os.path.dirname(path) == str(tmp_path / "dots")
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", os.path.basename(path))
        with open(path, encoding="utf-8") as f:
            _parse_dot(f.read())
    monkeypatch.delenv("POPTORCH_SIM_DOT_DIR")
    monkeypatch.chdir(tmp_path)
    assert os.path.dirname(ir.dot_checkpoint("X")[0]) == str(tmp_path)


def test_compiled_model_ir_counts_replicas_and_transfers():
    opts = poptorch.Options().deviceIterations(3).replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    model = torch.nn.Linear(4, 1)

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(x)
            return out, poptorch.identity_loss(out.sum(), "mean")
    ipu = poptorch.trainingModel(WithLoss(), opts)
    ipu(torch.randn(3 * 2 * 2 * 5, 4))
    assert ipu.ir.replication_factor == 2
    assert ipu.ir.num_host_transfers == 3 * 2
    assert ipu.ir.replica_grouping(group_size=2).assignment == [0, 0]
