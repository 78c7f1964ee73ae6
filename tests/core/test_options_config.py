"""Options from config files, JSON and environment variables (spec 2.3, 1.3)."""
import json
import sys

import pytest

import poptorch_core as poptorch
from poptorch_core import enums
from .test_options import _clean_environment  # noqa: F401 (autouse)


# loadFromFile ---------------------------------------------------------------


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_from_file(tmp_path):
    first = _write(tmp_path / "a.conf", [
        "# a comment line", "", "deviceIterations(4)   # inline comment",
        "replicationFactor(2)", "Training.gradientAccumulation(3)",
        "outputMode(poptorch.OutputMode.Sum)",
        "Precision.setPartialsType(torch.half)", "Simulator.backend('compile')"
    ])
    second = _write(tmp_path / "b.conf", ["deviceIterations(8)"])
    opts = poptorch.Options().loadFromFile(str(first)).loadFromFile(second)
    assert opts.device_iterations == 8  # the later file overrides it ...
    assert opts.replication_factor == 2  # ... and only what it sets
    assert opts.Training.gradient_accumulation == 3
    assert opts.output_mode == enums.OutputMode.Sum
    assert opts._Popart.options["partialsTypeMatMuls"] == "half"
    assert opts.Simulator.execution_backend == "compile"


def test_load_from_file_syntax_error_names_the_file_line(tmp_path):
    path = _write(tmp_path / "bad.conf", [
        "# header", "", "deviceIterations(4)", "replicationFactor(2",
        "Training.gradientAccumulation(2)"
    ])
    opts = poptorch.Options()
    with pytest.raises(poptorch.options.ConfigFileError) as info:
        opts.loadFromFile(path)
    message = str(info.value)
    assert message.startswith("SyntaxError at line 4 of bad.conf: ")
    assert message.endswith("\n> options.replicationFactor(2")
    # Nothing was applied: the whole file is checked first.
    assert opts.device_iterations == 1


def test_load_from_file_runtime_error_keeps_its_type(tmp_path):
    path = _write(tmp_path / "c.conf", ["deviceIterations(2)", "nosuch(1)"])
    with pytest.raises(AttributeError, match="Invalid attribute nosuch") as e:
        poptorch.Options().loadFromFile(path)
    if sys.version_info >= (3, 11):  # exception notes
        assert any("line 2 of c.conf" in n for n in e.value.__notes__)


# from_json and environment variables ---------------------------------------


def test_from_json():
    opts = poptorch.Options().from_json(
        json.dumps({
            "deviceIterations": 4,
            "outputMode": ["OutputMode.EveryN", 2],
            "connectionType": "ConnectionType.OnDemand",
            "Training.accumulationAndReplicationReductionType":
            "ReductionType.Sum",
            "Precision.setPartialsType": "torch.half",
            "Simulator.backend": "compile",
            "modelName": "Not.AnEnum",
        }))
    assert opts.device_iterations == 4
    assert (opts.output_mode, opts.output_return_period) == (1, 2)
    assert opts.connection_type == 1
    assert (opts.Training.accumulation_and_replication_reduction_type is
            enums.ReductionType.Sum)
    assert opts._Popart.options["partialsTypeMatMuls"] == "half"
    assert opts.Simulator.execution_backend == "compile"
    assert opts.model_name == "Not.AnEnum"


def test_from_json_errors():
    opts = poptorch.Options()
    with pytest.raises(ValueError, match="OutputMode has no member 'Every'"):
        opts.from_json('{"outputMode": "OutputMode.Every"}')
    with pytest.raises(ValueError, match="names a value, not a setter"):
        opts.from_json('{"device_iterations": 2}')
    with pytest.raises(ValueError, match="must be an object"):
        opts.from_json("[1, 2]")
    with pytest.raises(AttributeError, match="Invalid attribute nosuch"):
        opts.from_json('{"Training.nosuch": 1}')


def test_default_options_env(monkeypatch):
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS",
                       '{"deviceIterations": 3, "replicationFactor": 2}')
    opts = poptorch.Options()
    assert (opts.device_iterations, opts.replication_factor) == (3, 2)


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("POPTORCH_CACHE_DIR", str(tmp_path))
    popart = poptorch.Options()._Popart.options
    assert popart["cachePath"] == str(tmp_path)
    assert popart["enableEngineCaching"] is True


def test_sim_backend_env(monkeypatch):
    monkeypatch.setenv("POPTORCH_SIM_BACKEND", "compile")
    assert poptorch.Options().Simulator.execution_backend == "compile"
    # POPTORCH_DEFAULT_OPTIONS is applied afterwards, so it wins.
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS",
                       '{"Simulator.backend": "interpret"}')
    assert poptorch.Options().Simulator.execution_backend == "interpret"
    monkeypatch.setenv("POPTORCH_SIM_BACKEND", "fast")
    with pytest.raises(ValueError, match="POPTORCH_SIM_BACKEND: Invalid"):
        poptorch.Options()
