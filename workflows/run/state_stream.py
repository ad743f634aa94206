"""The thread state as the run publishes it on its workflow stream, topic ``messages``, for API clients.

The Agent Server API (``workers/api/``) streams a run's ``values`` (the whole thread state after each step) and
``messages-tuple`` (each complete message) to LangGraph clients. It must not rebuild them from history, so the
run publishes them itself, beside its ``progress`` events, in the same stream and so with the same durable
offsets. Three kinds of items, each a JSON object:

* ``{"kind": "snapshot", "values": STATE}``: the whole state; first in every execution of the run (a
  continue-as-new starts a new one), and again whenever a published message was removed or rewritten;
* ``{"kind": "message", "message": MESSAGE}``: one message appended to ``messages`` (``model_dump`` form);
* ``{"kind": "channels", "values": {CHANNEL: VALUE, ...}}``: the other channels that changed.

Folding the items from the stream's start, in offset order, gives the thread state at any offset
(``workers/api/stream.py`` does). Publishing adds no workflow commands: the stream lives in workflow memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from langchain_core.messages import BaseMessage
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

from middlewares.context import RunEvents
from vocabulary.messages import extends
from vocabulary.state import ThreadState

MESSAGES_TOPIC = "messages"
PROGRESS_TOPIC = "progress"
"""The workflow-stream topic carrying the run's progress events (``RunEvent.as_dict()``)."""

_RECHECKED = 3
"""How many of the newest published messages are compared in full at each sync (a middleware may rewrite the
latest AI message in place, e.g. drop its tool calls); older ones are compared by id only."""


class _Topic(Protocol):
    def publish(self, value: dict[str, Any]) -> None: ...


class StatePublisher:
    """Publishes what changed in the thread state since the last :meth:`sync`."""

    def __init__(self, topic: _Topic) -> None:
        self._topic = topic
        self._messages: list[BaseMessage] | None = None
        """The messages as last published (``None`` before the first snapshot)."""
        self._recent: list[dict[str, Any]] = []
        self._channels: dict[str, Any] = {}

    def sync(self, state: ThreadState) -> int:
        """Publish the changes of ``state``; returns how many stream items that took."""
        messages = state.messages
        channels = state.model_dump(mode="json", exclude={"messages"})
        known = self._messages
        # The same message objects with more after them (the usual turn) need no look at the ones published.
        if known is None or not (extends(messages, known) or self._unchanged_prefix(state, known)):
            self._topic.publish({"kind": "snapshot", "values": state.model_dump(mode="json")})
            self._remember(state, channels)
            return 1
        published = 0
        for message in messages[len(known) :]:
            self._topic.publish({"kind": "message", "message": message.model_dump(mode="json")})
            published += 1
        changed = {key: value for key, value in channels.items() if self._channels.get(key) != value}
        if changed:
            self._topic.publish({"kind": "channels", "values": changed})
            published += 1
        if published:
            self._remember(state, channels)
        return published

    def _unchanged_prefix(self, state: ThreadState, known: list[BaseMessage]) -> bool:
        count = len(known)
        if [message.id for message in state.messages[:count]] != [message.id for message in known]:
            return False
        recent = state.messages[max(0, count - _RECHECKED) : count]
        return [message.model_dump(mode="json") for message in recent] == self._recent

    def _remember(self, state: ThreadState, channels: dict[str, Any]) -> None:
        self._messages = list(state.messages)
        self._recent = [message.model_dump(mode="json") for message in state.messages[-_RECHECKED:]]
        self._channels = channels


def run_events(
    stream: WorkflowStream, prior: WorkflowStreamState | None, state: Callable[[], ThreadState]
) -> RunEvents:
    """The run's progress events, published on ``stream`` (topic ``progress``): ``hartflow run`` follows them
    live, and a client that reconnects resumes from its offset. Before each event the changes of ``state()``
    go out on topic ``messages``, so API clients see the state an event refers to before the event; events are
    numbered by their offset in the stream, which goes on from ``prior`` (the earlier executions' stream)."""
    progress = stream.topic(PROGRESS_TOPIC, type=dict)
    publisher = StatePublisher(stream.topic(MESSAGES_TOPIC, type=dict))
    return RunEvents(
        prior.base_offset + len(prior.log) if prior is not None else 0,
        publish=lambda event: progress.publish(event.as_dict()),
        before_each=lambda: publisher.sync(state()),
    )


def fold(values: dict[str, Any] | None, item: dict[str, Any]) -> dict[str, Any]:
    """The state after one ``messages`` item (``values`` is the state before it, ``None`` at the start)."""
    kind = item.get("kind")
    if kind == "snapshot":
        return dict(item["values"])
    current = dict(values or {"messages": []})
    if kind == "message":
        current["messages"] = [*current.get("messages", []), item["message"]]
    elif kind == "channels":
        current.update(item["values"])
    return current
