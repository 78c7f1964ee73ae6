"""Host-side timing of each call (``getPerfCounters`` and latencies).

The simulator stamps each device iteration's input transfer, compute and
output transfer on the host clock, in the shape PopTorch returns: for each
counter, one list of timestamps per input or output.
"""
import time
from typing import Dict, List, Tuple

_KEYS = ("input", "input_complete", "output", "output_complete")


class PerfCounters:
    """Timestamps of the calls of one executor."""

    def __init__(self, num_inputs: int = 1, num_outputs: int = 1):
        self._ticks: Dict[str, List[float]] = {k: [] for k in _KEYS}
        self._num_inputs = num_inputs
        self._num_outputs = num_outputs
        self._start = 0.0

    def configure(self, num_inputs: int, num_outputs: int) -> None:
        self._num_inputs = max(1, num_inputs)
        self._num_outputs = max(1, num_outputs)

    def start_call(self) -> None:
        self._start = time.time()

    def end_call(self, layout) -> None:
        end = time.time()
        steps = layout.device_iterations
        span = (end - self._start) / steps
        for i in range(steps):
            begin = self._start + i * span
            self._ticks["input"].append(begin)
            self._ticks["input_complete"].append(begin)
            self._ticks["output"].append(begin + span)
            self._ticks["output_complete"].append(begin + span)

    def counters(self) -> Dict[str, List[List[float]]]:
        if not self._ticks["input"]:
            return {k: [[]] for k in _KEYS}
        out = {}
        for key in _KEYS:
            count = self._num_inputs if key.startswith("input") \
                else self._num_outputs
            out[key] = [list(self._ticks[key]) for _ in range(count)]
        return out

    def _latency(self, start_key: str, end_key: str) -> Tuple[float, float,
                                                              float]:
        starts, ends = self._ticks[start_key], self._ticks[end_key]
        if not ends:
            return (0., 0., 0.)
        values = [e - s for s, e in zip(starts, ends)]
        return (min(values), max(values), sum(values) / len(values))

    def host_ipu_latency(self):
        return self._latency("input", "input_complete")

    def compute_latency(self):
        return self._latency("input_complete", "output")

    def ipu_host_latency(self):
        return self._latency("output", "output_complete")

    def latency(self):
        return self._latency("input", "output_complete")
