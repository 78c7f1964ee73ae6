"""Datasets that need no download.

* :class:`NCITPSA`: the 4,999 NCI molecules with TPSA labels shipped inside
  the ``rdkit`` wheel, as PyG graphs (the default dataset).
* :class:`SyntheticMolecules`: seeded molecule-like graphs of any count, for
  scaling runs.
* :func:`power_law_graph`: one large seeded graph with power-law degrees
  (1M nodes and 10M edges by default), for the sampling loaders.

The molecule datasets have the layout of ``torch_geometric.utils.from_smiles``: ``x`` [n, 9]
long, ``edge_index`` [2, e] long (both directions), ``edge_attr`` [e, 3]
long and a graph label ``y`` [1, 1] float32.
"""
from .nci_tpsa import NCITPSA, default_root
from .power_law import power_law_graph
from .synthetic import SyntheticMolecules

__all__ = ["NCITPSA", "SyntheticMolecules", "default_root",
           "power_law_graph"]
