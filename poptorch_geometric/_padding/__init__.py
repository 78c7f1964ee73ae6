"""The padding plan of a fixed-size batch (internal).

``plan`` defines what is padded and how (``Level``, ``AttrSpec``,
``PaddingPlan``, padding graphs); ``columns`` views a list of graphs as
columns; ``sizes`` counts nodes and edges; ``classify`` decides each
attribute's level and fill; ``budget`` splits the node and edge budgets
between padding graphs; ``trim`` cuts graphs down for the ``Trim``
over-size strategies.
"""
