"""Sphinx configuration of the documentation site.

Build it with ``python -m sphinx -W -b html docs docs/_build`` (the
``docs`` extra installs Sphinx); ``tests/test_docs.py`` runs the same build
with ``-W``, so a warning fails the suite. The API reference is autodoc
over the public names; docstrings use Google style through napoleon.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The checkout's packages, not an installed copy, and the local extension.
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "poptorch-sim"
author = "poptorch-sim contributors"
copyright = "poptorch-sim contributors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "generated_markdown",
]

# reStructuredText pages, plus the benchmark page that
# ``examples/benchmark.py --markdown`` writes (read by generated_markdown).
source_suffix = {".rst": "restructuredtext",
                 ".md": "generated_markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# Members in source order, as their modules present them; no type hints in
# the signatures (they repeat the descriptions and make long lines).
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# PopTorch's optimizers list the arguments torch's lack under this title.
napoleon_custom_sections = [("Extra args", "params_style")]

html_theme = "alabaster"
html_static_path = []
html_title = "poptorch-sim"
