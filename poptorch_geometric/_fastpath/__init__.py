"""The vectorised collation path (internal).

It builds batches bit-identical to the reference path
(``Batch.from_data_list`` plus the padding plan): ``vectorised`` concatenates
each attribute once and writes padding into preallocated tensors;
``storage`` and ``graph_cache`` read an ``InMemoryDataset``'s storage with one
``index_select`` per attribute; ``recipe`` builds later batches of one
storage from the decisions of an earlier batch and the graphs' rows alone.
"""
