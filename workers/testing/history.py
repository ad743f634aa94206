"""A run's history, read back: its events (across continue-as-new too), the activities it scheduled and their
decoded inputs (the messages a model call was sent), the history bytes each turn adds and every payload an event
carries (the payload tests, ``bench/history_size.py``), and a replay against the current workflow code."""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from langchain_core.messages import AnyMessage, messages_from_dict
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer

from vocabulary import transcript
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput
from workers.worker import WORKFLOWS, workflow_runner


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    return [event async for event in handle.fetch_history_events()]


def scheduled_activities(events: list[Any]) -> list[tuple[str, str]]:
    """(activity type, summary) of every ActivityTaskScheduled event, in order."""
    result = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = event.user_metadata.summary.data.decode() if event.HasField("user_metadata") else ""
            result.append(
                (
                    event.activity_task_scheduled_event_attributes.activity_type.name,
                    json.loads(summary or '""'),
                )
            )
    return result


async def scheduled_inputs(client: Client, events: list[Any], activity: str, input_type: type[Any]) -> list[Any]:
    """The decoded input of every ActivityTaskScheduled event of ``activity``, in order."""
    inputs = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attributes = event.activity_task_scheduled_event_attributes
        if attributes.activity_type.name == activity:
            [decoded] = await client.data_converter.decode(list(attributes.input.payloads), [input_type])
            inputs.append(decoded)
    if input_type is ModelCallInput:
        fill_transcript_messages(inputs)  # agent calls send their messages by reference
    return inputs


async def chain_histories(client: Client, workflow_id: str, first_run_id: str) -> list[list[Any]]:
    """The events of every run of a continue-as-new chain, one list per run, oldest run first."""
    runs: list[list[Any]] = []
    run_id: str | None = first_run_id
    while run_id is not None:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        events = [event async for event in handle.fetch_history_events()]
        runs.append(events)
        last = events[-1]
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return runs


@dataclass
class TurnCost:
    turn: int
    events: int
    bytes: int
    """Sum of ``event.ByteSize()`` from this turn's model call to the next turn's."""
    external_bytes: int
    """Bytes these events moved to external storage (the claim check)."""


def model_turn(event: Any) -> int | None:
    if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        return None
    if event.activity_task_scheduled_event_attributes.activity_type.name != MODEL_INVOKE:
        return None
    summary = json.loads(event.user_metadata.summary.data or b'""') if event.HasField("user_metadata") else ""
    if " · turn " not in summary:
        return None  # an auxiliary call (title, summarisation)
    return int(summary.rsplit(" · turn ", 1)[1])


def turn_costs(runs: list[list[Any]]) -> list[TurnCost]:
    """The history each agent turn adds, for turns that are neither the first nor the last of their run (the
    first carries the run's start, the last its commit and continue-as-new)."""
    costs: list[TurnCost] = []
    for events in runs:
        starts = [(index, turn) for index, event in enumerate(events) if (turn := model_turn(event)) is not None]
        for (start, turn), (end, _) in itertools.pairwise(starts[1:]):
            window = events[start:end]
            costs.append(
                TurnCost(
                    turn=turn,
                    events=len(window),
                    bytes=sum(event.ByteSize() for event in window),
                    external_bytes=sum(external_size(payload) for event in window for payload in payloads_in(event)),
                )
            )
    return costs


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every ``Payload`` inside a protobuf message (inputs, results, headers, memo, search attributes...)."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            items = [item for item in value.values() if isinstance(item, Message)]
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            yield from payloads_in(item)


def external_size(payload: Payload) -> int:
    """Bytes of the value a claim-check reference stands for; 0 for an inline payload."""
    return sum(entry.size_bytes for entry in payload.external_payloads)


def fill_transcript_messages(calls: list[ModelCallInput]) -> None:
    """Give agent model calls their ``messages`` back, for tests that inspect what the model was sent.

    An agent call carries its messages by reference (``ModelCallInput.transcript``): the bodies of messages the
    previous request of the run did not carry, and ids for the rest. Following the calls of one history in order
    recovers every list. A call that builds on a manifest from before this history (the first call after a
    continue-as-new) cannot be recovered from it and raises."""
    bodies: dict[str, str] = {}
    preambles: dict[str, str] = {}
    manifest: str | None = None
    ids: list[str] = []
    for call in calls:
        ref = call.transcript
        if ref is None:
            continue
        if ref.base is not None and ref.base != manifest:
            raise ValueError(f"model call builds on manifest {ref.base} from outside these calls")
        ids = [*ids[: ref.keep], *ref.append] if ref.base is not None else list(ref.append)
        if ref.preamble is not None:
            # The system message and tools went by hash too: the body is in the first call that sent it.
            if ref.preamble_body is not None:
                preambles[ref.preamble] = ref.preamble_body
            call.system_message, call.tools = transcript.parse_preamble(preambles[ref.preamble])
        bodies.update(ref.bodies)
        manifest = ref.digest
        messages = messages_from_dict([json.loads(bodies[message_id]) for message_id in ids])
        call.messages = cast(list[AnyMessage], messages)


async def replay(client: Client, handle: WorkflowHandle[Any, Any]) -> None:
    """Replay the history of ``handle``'s run against the current workflow code, with ``client``'s converter;
    raises on any nondeterminism."""
    replayer = Replayer(
        workflows=list(WORKFLOWS), data_converter=client.data_converter, workflow_runner=workflow_runner()
    )
    history = await handle.fetch_history()
    with no_garbage_collection():
        await replayer.replay_workflow(history)


@contextlib.contextmanager
def no_garbage_collection() -> Iterator[None]:
    """Collect garbage now, on the calling thread, and none while the block replays histories.

    The SDK fails an activation that has not yielded within 2 s of wall time as a deadlock (TMPRL1101), and the
    interpreter runs a due collection, with every finalizer it calls, on whichever thread allocates: a replay's
    workflow thread too. In a test process that has run a thousand tests, on a machine the soak's servers still
    share, one such collection held that thread past 2 s (a clean-clone CI run: the detector's interrupt landed in
    a leaked asyncio transport's ``__del__``), and a history that replays was reported as a deadlock. A replay
    check judges determinism; the detector still catches workflow code that blocks."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
