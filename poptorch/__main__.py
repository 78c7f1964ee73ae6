"""``python -m poptorch``: the installation self-check of ``python -m
poptorch_core``, under the name PopTorch users type."""
import sys

from poptorch_core.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
