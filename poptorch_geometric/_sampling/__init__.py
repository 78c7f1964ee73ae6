"""Sampling internals: CSC arrays built once per graph, a vectorised
fixed-fanout neighbour sampler, and METIS partitions through pymetis."""
from .csc import CSC, csc_of
from .neighbor_sampler import TorchNeighborSampler

__all__ = ["CSC", "csc_of", "TorchNeighborSampler"]
