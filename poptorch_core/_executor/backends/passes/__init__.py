"""Graph passes shared by both backends: what a captured graph becomes
before it runs on the host.

Each pass keeps the graph's results equal to running the captured graph as
it is (``interpret`` is the reference): ``lowering`` turns PopTorch's marker
ops into ATen, and ``dropout_masks`` draws dropout's masks from uniform
numbers; ``wide_inputs`` lets int64 inputs skip the int32 round trip;
``aliasing`` answers which values share memory, for the passes that remove
a copy; ``in_place_temporaries`` writes dead temporaries in place
(``interpret``); ``cat_copies`` copies ``cat`` inputs that inductor would
update in place; ``training_step`` and ``fused_adam`` trace a training
micro-batch (and its Adam update) as one graph for ``compile``.
"""
