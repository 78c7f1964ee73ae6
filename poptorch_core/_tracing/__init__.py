"""Dispatch tracing: capture a model into an ATen-level ``torch.fx`` graph
(:mod:`.capture`) and check it against IPU rules (:mod:`.rules`).

The PopXL-style container of the result, ``Ir``, lives in
:mod:`poptorch_core._ir`, one layer up.
"""
