"""``python -m poptorch_core``: a self-check of the installation.

Prints the versions, the options in force (including the environment
variables that change them) and the simulated device, then compiles and
runs a tiny training model to prove the stack works end to end.
"""
import os
import sys
import time

import torch

import poptorch_core as poptorch


def main() -> int:
    print(f"poptorch (simulated IPU) {poptorch.__version__}, "
          f"torch {torch.__version__}, Python {sys.version.split()[0]}")
    try:
        import torch_geometric
        print(f"torch_geometric {torch_geometric.__version__}")
    except ImportError:
        print("torch_geometric: not installed")
    opts = poptorch.Options()
    sim = opts.Simulator
    cuda = "available" if torch.cuda.is_available() else "not available"
    print(f"Simulated device: IPU version {sim.ipu_version}, host device "
          f"{sim.host_device} (CUDA {cuda}), backend {sim.execution_backend}")
    for var in ("POPTORCH_LOG_LEVEL", "POPTORCH_SIM_BACKEND",
                "POPTORCH_DEFAULT_OPTIONS", "POPTORCH_CACHE_DIR"):
        if var in os.environ:
            print(f"  {var}={os.environ[var]}")
    print(f"Options: {opts!r}")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1))

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, x, y):
            out = self.net(x)
            return out, torch.nn.functional.mse_loss(out, y)

    train_opts = poptorch.Options().deviceIterations(4)
    ipu_model = poptorch.trainingModel(
        WithLoss(), train_opts, poptorch.optim.SGD(model.parameters(), lr=0.05))
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    start = time.perf_counter()
    first = last = None
    for _ in range(50):
        _, loss = ipu_model(x, y)
        first = loss.item() if first is None else first
        last = loss.item()
    print(f"Self-check: 200 training steps in "
          f"{time.perf_counter() - start:.2f}s, loss {first:.3f} -> "
          f"{last:.3f}")
    if not last < first:
        print("Self-check FAILED: the loss did not decrease")
        return 1
    print("Self-check passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
