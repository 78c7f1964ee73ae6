"""Profiling channels. PopVision tracing does not exist in the simulator, so a
:class:`Channel` records nothing; its API is kept so that scripts run."""
import contextlib
from typing import Any, Iterator

__all__ = ["Channel"]


class Channel:
    """A named trace channel (no-op)."""

    def __init__(self, name: str):
        self._name = name

    def instrument(self, obj: Any, *methods: str) -> None:
        """Would trace each call of ``obj``'s ``methods``; records nothing
        here."""
        del obj, methods

    @contextlib.contextmanager
    def tracepoint(self, name: str) -> Iterator[None]:
        """Context manager that would record its body's duration as
        ``name``; records nothing here."""
        del name
        yield
