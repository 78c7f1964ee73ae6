"""The machinery behind ``python -m poptorch_geometric.coverage``: the
batches (``data``), one case per PyG name (``cases_conv``, ``cases_other``),
the checks of one row (``probe``) and the Markdown table (``table``)."""
