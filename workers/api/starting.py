"""Turning a run request into a segment of the thread's workflow: a new run, or the answer that resumes a paused
one. Everything is checked before anything is written: a refused request starts nothing and records nothing.

The request itself (its shape, stream modes, settings, model) is read by ``workers/api/run_request.py``.

* ``command: {resume: ...}`` answers the pending clarification through the run's validated ``reply`` update
  (``"text"``, ``{option_id}``, ``{fields}`` or ``{answer}``): refused → 422, the thread stays interrupted; on a
  thread that is not interrupted → 400 (``workers/api/replying.py``). A pending tool approval takes
  ``{decisions: [...]}`` (``workers/api/approvals.py``).
* On an interrupted thread, a new message is the answer too: DeerFlow's UI sends a HumanMessage whose
  ``additional_kwargs.human_input_response`` names the option or the text; any other message is free text.
* Otherwise a new workflow starts (the message's images stored as uploads and shown to a vision model:
  ``workers/api/images.py``); a thread whose run is still active is busy: the message waits in the thread's queue
  (``enqueue``, the default: ``workers/api/queued.py``), 409 with ``reject``, or the active run is cancelled first
  (``interrupt``, ``rollback``: ``workers/api/multitask.py``).
  A ``checkpoint`` / ``checkpoint_id`` older than the newest version forks
  there or reruns a turn (``workers/api/forks.py``); ``input.title`` sets the title the run starts with. The
  message's ``additional_kwargs.files`` must name the thread's uploads (``workers/api/message_files.py``, checked
  first), which reach the run as ``hartflow run --file`` does.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from fastapi import HTTPException
from temporalio.exceptions import WorkflowAlreadyStartedError

from activities.agents_store import Agent
from vocabulary.approvals import ReviewInput, is_approval
from vocabulary.contracts import ThreadRef, WebhookTarget
from vocabulary.workflow_ids import run_workflow_id
from workers.api import approvals, checkpoints, forks, multitask, queued, records, replying
from workers.api.deps import ApiContext
from workers.api.discovery import assistant
from workers.api.images import message_images, require_vision, store_images
from workers.api.message_files import attached_files
from workers.api.outages import riding_out, storage_down
from workers.api.run_agent import personal_settings, requested_model, run_agent
from workers.api.run_request import RunCreate, message_content, model_spec, run_settings
from workers.api.webhooks import refuse_on_reply, run_webhook
from workers.client.runs import Runs, RunStart
from workflows.run import ReplyInput, message_problem


async def begin(context: ApiContext, thread: ThreadRef, body: RunCreate) -> records.RunRecord:
    """Start or resume the thread's workflow for this request and record the API run; refusals raise first."""
    agent = await run_agent(context, thread.user_id, body.assistant_id, body.option("agent_name"))
    body.modes()
    webhook = await run_webhook(context.config.webhooks, body.webhook)
    multitask.check_strategy(body.multitask_strategy)
    attached = await attached_files(context, thread, body.last_human())
    ledger = context.ledger
    if not await ledger.thread_exists(thread):
        if body.if_not_exists != "create":
            raise HTTPException(404, f"thread {thread.thread_id} not found")
        await ledger.save_thread(thread, records.new_thread_record(thread, {}))
    current = await ledger.chain(thread)
    named = checkpoints.requested_id(body.checkpoint, body.checkpoint_id)
    fork = await forks.resolve(ledger, thread, named, body.last_human())
    if fork is not None and current.active:
        raise HTTPException(409, f"thread {thread.thread_id} is busy: a run is {current.status}; a fork needs it idle")
    pending = await ledger.pending_request(thread, current) if fork is None else None
    max_chars = context.config.run.max_message_chars
    reply: ReplyInput | ReviewInput | None = None
    if is_approval(pending) and fork is None:
        assert pending is not None
        reply = approvals.review_for(body.command, pending, thread.user_id, max_chars, body.last_human())
    else:
        reply = replying.reply_for(body, pending, current, max_chars)
    if reply is not None:
        refuse_on_reply(body.webhook)
        assert current.first_run_id is not None and current.workflow_id is not None
        workflow_id = current.workflow_id  # a paused run started before ids were per user answers under its own
        offset = await replying.stream_offset(context, workflow_id)
        await replying.answer(context, workflow_id, reply)
        record = _record(thread, body, workflow_id, current.first_run_id, offset)
        # The run took the reply: its record must follow, through a storage outage too (no memo has it).
        await riding_out(
            lambda: ledger.save_run(thread, record),
            f"recording run {record.run_id}",
            outage=storage_down,
            service="storage",
        )
        return record
    if current.active and body.multitask_strategy in ("interrupt", "rollback"):
        rollback = body.multitask_strategy == "rollback"
        current, fork = await multitask.interrupt_for_new_run(context, thread, current, rollback=rollback)
    if body.multitask_strategy == "enqueue" and await queued.goes_to_queue(context, thread, current):
        record = _record(thread, body, run_workflow_id(thread.user_id, thread.thread_id), "", 0)
        webhook = None if webhook is None else replace(webhook, run_id=record.run_id)
        await queued.enqueue(
            context, thread, record, await _prepare(context, thread, body, record, None, attached, agent, webhook)
        )
        return record
    if current.active:
        raise HTTPException(
            409,
            f"thread {thread.thread_id} is busy: a run is {current.status}; "
            "wait for it to finish or cancel it (multitask_strategy 'reject')",
        )
    record = _record(thread, body, run_workflow_id(thread.user_id, thread.thread_id), "", 0)
    webhook = None if webhook is None else replace(webhook, run_id=record.run_id)
    run = await _prepare(context, thread, body, record, fork, attached, agent, webhook)
    try:
        handle = await Runs(context.client, context.config.temporal.task_queue).start(run)
    except WorkflowAlreadyStartedError:
        raise HTTPException(409, f"thread {thread.thread_id} is busy: a run is already active") from None
    record.workflow_run_id = handle.first_execution_run_id or handle.result_run_id or ""
    # From here the run exists: should storage fail now, its record comes back from the memo (records.py).
    await ledger.finalize_previous(thread, current)
    await ledger.save_run(thread, record)
    # As LangGraph's server does on every run: clients list a graph's threads by it (Agent Chat UI's sidebar).
    graph = agent.graph_id if agent is not None else str(assistant(body.assistant_id)["graph_id"])
    await ledger.stamp_thread(thread, {"graph_id": graph, "assistant_id": body.assistant_id})
    return record


async def _prepare(
    context: ApiContext,
    thread: ThreadRef,
    body: RunCreate,
    record: records.RunRecord,
    fork: forks.Fork | None,
    attached: list[dict[str, Any]],
    agent: Agent | None,
    webhook: WebhookTarget | None,
) -> RunStart:
    """The run this request starts, every part of it checked (nothing is written but the message's images)."""
    rerun = fork.message if fork is not None else None
    message = rerun or body.last_human()
    images = message_images(message) if rerun is None else []
    image_names = forks.message_images(rerun) if rerun is not None else tuple(image.name for image in images)
    text = forks.message_text(rerun) if rerun is not None else message_content(message) if message is not None else ""
    if images and not text:
        text = f"(attached: {', '.join(image_names)})"
    problem = message_problem(text, context.config.run.max_message_chars)
    if problem is not None:
        raise HTTPException(422, f"input.messages: {problem}")
    chosen = model_spec(context, requested_model(context.config, body.option("model_name"), agent))
    require_vision(chosen, images)
    await store_images(context, thread, images)
    settings = await personal_settings(context, thread.user_id, run_settings(context, body), agent)
    settings = approvals.with_run_rules(settings, body.option("tool_approval"))
    settings = settings.model_copy(update={"model_capabilities": chosen.settings.model_capabilities})
    sent_id = message.get("id") if message is not None else None
    message_id = forks.message_id(rerun) if rerun is not None else sent_id if isinstance(sent_id, str) else None
    files = forks.message_files(rerun) if rerun is not None else tuple(entry["filename"] for entry in attached)
    return RunStart(
        thread,
        text,
        chosen.spec,
        settings,
        files=files if rerun is not None else (*files, *image_names),
        file_entries=forks.message_file_entries(rerun) if rerun is not None else tuple(attached),
        images=image_names,
        message_id=message_id,
        memo={records.RUN_MEMO: records.memo_of(record)},
        base_version=None if fork is None else fork.base,
        rerun_of=None if fork is None else fork.rerun_of,
        title=(body.input or {}).get("title"),
        webhook=webhook,
    )


def _record(thread: ThreadRef, body: RunCreate, workflow_id: str, first_run_id: str, offset: int) -> records.RunRecord:
    return records.RunRecord(
        run_id=str(uuid.uuid4()),
        thread_id=thread.thread_id,
        assistant_id=body.assistant_id,
        workflow_id=workflow_id,
        workflow_run_id=first_run_id,
        start_offset=offset,
        created_at=records.now(),
        metadata=dict(body.metadata),
        multitask_strategy=body.multitask_strategy,
        kwargs={
            "input": body.input,
            "command": body.command,
            "config": body.config,
            "context": body.context,
            "stream_mode": body.modes(),
            "on_disconnect": body.on_disconnect,
            "checkpoint_id": checkpoints.requested_id(body.checkpoint, body.checkpoint_id),
            "webhook": body.webhook,
        },
    )
