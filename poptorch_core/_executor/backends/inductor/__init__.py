"""The ``compile`` backend's tuning of torch inductor on the CPU.

``cpu`` holds the inductor configuration and graph passes for CPU graphs;
``row_scatter`` writes row scatter-adds as a loop in the generated C++;
``linear_strides`` gives inductor's vectorisation its strides without
``sympy.simplify``; ``background_builds`` and ``precompiled_headers`` build
the C++ libraries while the rest of a compilation goes on; ``isa_probe``
runs inductor's vector-ISA check ahead of the first compilation. None of
them changes a result: the compiled graph computes what ``interpret`` does.
"""
