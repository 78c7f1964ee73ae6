"""The capture records stack traces without torch's frame filter: its list
of torch's files is empty only in a thread that is capturing (so that the
capture never imports inductor and ``torch.export`` to build it), torch's
own everywhere else, and the rule errors still name the user's line."""
import subprocess
import sys
import textwrap
import threading

import torch.fx.experimental.symbolic_shapes as symbolic_shapes

from poptorch_core._tracing.stack_traces import torch_frames_kept


def _list_in_another_thread():
    seen = []
    worker = threading.Thread(
        target=lambda: seen.append(symbolic_shapes.uninteresting_files()))
    worker.start()
    worker.join()
    return seen[0]


def test_the_list_is_empty_only_in_the_capturing_thread():
    torch_list = symbolic_shapes.uninteresting_files
    with torch_frames_kept():
        assert symbolic_shapes.uninteresting_files() == frozenset()
        with torch_frames_kept():  # nested
            assert symbolic_shapes.uninteresting_files() == frozenset()
        assert symbolic_shapes.uninteresting_files() == frozenset()
        assert symbolic_shapes.__file__ in _list_in_another_thread()
    assert symbolic_shapes.uninteresting_files is torch_list
    assert symbolic_shapes.__file__ in symbolic_shapes.uninteresting_files()


def test_torch_list_is_back_after_an_error():
    torch_list = symbolic_shapes.uninteresting_files
    try:
        with torch_frames_kept():
            raise KeyError("inside")
    except KeyError:
        pass
    assert symbolic_shapes.uninteresting_files is torch_list


def test_an_interpret_model_never_imports_inductor_to_trace(tmp_path):
    """In a fresh interpreter: a model traced and run with the default
    backend leaves inductor's and export's modules unimported (torch's
    frame list imports them), and a rule error still names the line."""
    script = textwrap.dedent('''
        import sys
        import torch
        import poptorch

        class Model(torch.nn.Module):
            def forward(self, x):
                return x.nonzero()  # the user's line

        model = poptorch.inferenceModel(torch.nn.Linear(3, 2))
        model(torch.ones(4, 3))
        print(sorted(m for m in ("torch._inductor.sizevars",
                                 "torch.export._trace") if m in sys.modules))
        try:
            poptorch.inferenceModel(Model())(torch.ones(4, 3))
        except poptorch.Error as error:
            print(str(error).splitlines()[-2].strip())
        ''')
    path = tmp_path / "model.py"
    path.write_text(script)
    line = script.splitlines().index(
        "        return x.nonzero()  # the user's line") + 1
    result = subprocess.run([sys.executable, str(path)],
                            capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[:2] == [
        "[]", f"at {path}:{line} in forward"], result.stdout
