"""A run's progress events, numbered by their offset in the run's workflow stream (``RunContext.emit``), and the
one event a run may hold back until what it announces is stored (``run_finished``: ``workflows/run/finish.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunEvent:
    """A progress event a client can follow (turns, tool calls, retries, pauses)."""

    seq: int
    kind: str
    at: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The wire shape (``events`` query, progress stream, ``hartflow run --events``): one flat object. ``type``
        is the name DeerFlow's app reads from a custom event (``task_started``, ``task_running``, ``llm_retry``: an
        emitter passes ``type=`` where DeerFlow's name differs from the kind), else the kind itself."""
        return {"seq": self.seq, "kind": self.kind, "type": self.kind, "at": self.at, **self.data}


class RunEvents:
    """The run's progress events: kept for the ``events`` query, numbered on from ``offset`` and handed to
    ``publish`` (the run's progress stream). ``before_each`` runs before an event is numbered and returns how many
    stream items it published (the run publishes its state changes there, so API clients see the state an event
    refers to before the event); ``seq`` is therefore the event's offset in the run's workflow stream."""

    def __init__(
        self,
        offset: int = 0,
        *,
        publish: Callable[[RunEvent], None] | None = None,
        before_each: Callable[[], int] | None = None,
    ) -> None:
        self.items: list[RunEvent] = []
        self._offset = offset
        self._publish = publish
        self._before_each = before_each
        self._held: RunEvent | None = None
        self._behind_held: list[tuple[str, Callable[[], str], dict[str, Any]]] = []

    def add(self, kind: str, at: Callable[[], str], data: dict[str, Any]) -> None:
        if self._held is not None:
            stamped = at()
            self._behind_held.append((kind, lambda: stamped, data))
            return
        self._out(self._next(kind, at, data))

    def hold(self, kind: str, at: Callable[[], str], data: dict[str, Any]) -> RunEvent:
        """Number an event as the next one but keep it back until :meth:`release`; events added meanwhile wait
        behind it, so it keeps its number. The run's ``run_finished`` is held while its final commit and its
        archive (which stores the event) are written: no client learns the run finished before they are."""
        if self._held is not None:
            raise RuntimeError(f"event {self._held.kind} is held already")
        self._held = self._next(kind, at, data)
        return self._held

    def release(self) -> None:
        """Publish the held event, then the events that waited behind it."""
        held, waiting = self._held, self._behind_held
        if held is None:
            return
        self._held, self._behind_held = None, []
        self._out(held)
        for kind, at, data in waiting:
            self.add(kind, at, data)

    def _out(self, event: RunEvent) -> None:
        self.items.append(event)
        if self._publish is not None:
            self._publish(event)

    def _next(self, kind: str, at: Callable[[], str], data: dict[str, Any]) -> RunEvent:
        if self._before_each is not None:
            self._offset += self._before_each()
        return RunEvent(self._offset + len(self.items), kind, at(), data)
