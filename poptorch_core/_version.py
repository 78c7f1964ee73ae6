#: The PopTorch API version this package reproduces.
__version__ = "3.4.0"
#: Version of the simulator itself (the distribution ``poptorch-sim``).
__simulator_version__ = "0.1.0"
