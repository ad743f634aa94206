"""Turning a run request into a segment of the thread's workflow: a new run, or the answer that resumes a paused
one. Everything is checked before anything is written: a refused request starts nothing and records nothing.

* ``command: {resume: ...}`` answers the pending clarification through the run's validated ``reply`` update
  (``"text"``, ``{option_id}``, ``{fields}`` or ``{answer}``): refused → 422, the thread stays interrupted; on a
  thread that is not interrupted → 400. A pending tool approval takes ``{decisions: [...]}``
  (``workers/api/approvals.py``).
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

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from fastapi import HTTPException
from pydantic import Field, ValidationError, field_validator
from temporalio.client import WorkflowQueryRejectedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.agents_store import Agent
from middlewares.run_settings import RunSettings
from vocabulary.approvals import ReviewInput, is_approval
from vocabulary.contracts import ThreadRef, WebhookTarget
from vocabulary.workflow_ids import run_workflow_id
from workers.api import approvals, checkpoints, forks, multitask, queued, records, status
from workers.api.deps import ApiContext
from workers.api.discovery import assistant
from workers.api.images import message_images, require_vision, store_images
from workers.api.limits import ApiBody
from workers.api.message_files import attached_files
from workers.api.outages import riding_out, storage_down
from workers.api.run_agent import personal_settings, requested_model, run_agent
from workers.api.webhooks import refuse_on_reply, run_webhook
from workers.client.runs import ReplyRefused, Runs, RunStart
from workers.models import ModelSelectionError, RunModel, select_model
from workflows.run import ReplyInput, message_problem

STREAM_MODES = ("values", "messages-tuple", "updates", "custom")


class RunCreate(ApiBody):
    """The run payload ``langgraph-sdk`` sends; fields it always sends (``stream_resumable: false``, ...) and
    those hartflow does not use are accepted and ignored, never 422. The parts hartflow reads are checked for
    their shape here (an object where an object is read), so a malformed one is a 422, not a crash."""

    assistant_id: str = "hartflow"
    input: dict[str, Any] | None = None
    command: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] = "enqueue"
    """What a request does on a busy thread (``workers/api/multitask.py``)."""
    if_not_exists: Literal["reject", "create"] = "reject"
    on_disconnect: Literal["cancel", "continue"] = "continue"
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    webhook: str | None = None

    @field_validator("config")
    @classmethod
    def _config_shape(cls, config: dict[str, Any] | None) -> dict[str, Any] | None:
        _object_or_null((config or {}).get("configurable"), "configurable")
        return config

    @field_validator("input")
    @classmethod
    def _input_shape(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if (value or {}).get("title") is not None and not isinstance((value or {})["title"], str):
            raise ValueError("input.title must be text")
        messages = (value or {}).get("messages")
        if messages is None:
            return value
        if not isinstance(messages, list):
            raise ValueError("messages must be a list of messages")
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                continue  # not a message hartflow reads (as before: only the last human message is)
            kwargs = _object_or_null(message.get("additional_kwargs"), f"messages[{index}].additional_kwargs")
            _object_or_null(
                (kwargs or {}).get("human_input_response"), f"messages[{index}].additional_kwargs.human_input_response"
            )
        return value

    @field_validator("command")
    @classmethod
    def _command_shape(cls, command: dict[str, Any] | None) -> dict[str, Any] | None:
        if command is None or "resume" not in command or isinstance(command["resume"], str):
            return command
        resume = command["resume"]
        if isinstance(resume, dict) and "decisions" in resume:
            return command  # a tool approval's decisions: checked against the request (workers/api/approvals.py)
        if not isinstance(resume, dict) or not set(resume) <= {"answer", "option_id", "fields"}:
            raise ValueError("resume must be text or {answer | option_id | fields}")
        for key in ("answer", "option_id"):
            if resume.get(key) is not None and not isinstance(resume[key], str):
                raise ValueError(f"resume.{key} must be text")
        _object_or_null(resume.get("fields"), "resume.fields")
        return command

    def modes(self) -> list[str]:
        return stream_modes(self.stream_mode)

    def option(self, name: str) -> Any:
        """A run option from ``context`` (DeerFlow's frontend) or ``config.configurable`` (LangGraph's way)."""
        configurable = (self.config or {}).get("configurable") or {}
        return (self.context or {}).get(name, configurable.get(name))


def _object_or_null(value: Any, where: str) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def stream_modes(requested: str | list[str] | None) -> list[str]:
    modes = [requested] if isinstance(requested, str) else list(requested or ["values"])
    unknown = [mode for mode in modes if mode not in STREAM_MODES]
    if unknown:
        raise HTTPException(422, f"unknown stream mode {unknown[0]!r}; served: {', '.join(STREAM_MODES)}")
    return modes


def run_settings(context: ApiContext, body: RunCreate) -> RunSettings:
    update: dict[str, Any] = {}
    for option, key in (("is_plan_mode", "plan_mode"), ("subagent_enabled", "subagent_enabled")):
        if body.option(option) is not None:
            update[key] = body.option(option)
    limit = (body.config or {}).get("recursion_limit")
    if limit is not None:
        update["recursion_limit"] = limit
    try:
        return RunSettings.model_validate({**context.config.run.model_dump(), **update})
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise HTTPException(422, f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


def model_spec(context: ApiContext, requested: Any) -> RunModel:
    """``model_name``: a name from the config's ``models`` list, or a raw spec only with ``api.allow_model_specs``;
    anything else (DeerFlow's UI sends the names ``GET /api/models`` listed) means the default model."""
    config = context.config
    name: str | None = None
    if isinstance(requested, str) and ":" in requested:
        if not config.api.allow_model_specs:
            raise HTTPException(422, f"model_name {requested[:200]!r} is a raw model spec; set api.allow_model_specs")
        name = _script_in_folder(config.api.model_scripts_dir, requested)
    elif isinstance(requested, str) and any(entry.name == requested for entry in config.models):
        name = requested
    try:
        return select_model(config, name)
    except ModelSelectionError as exc:
        raise HTTPException(422, str(exc)) from None


def _script_in_folder(folder: Path | None, spec: str) -> str:
    """A caller's ``scripted:PATH`` as a spec under ``api.model_scripts_dir`` (a relative PATH is taken from
    there), else 422. A scripted model reads its file on the server: from anywhere else, the answer (a parse
    error, a missing file) would tell any caller what the server's files hold. The refusal is the same whether
    the file exists or not, and is given before the file is looked at."""
    prefix, _, path = spec.partition(":")
    if prefix != "scripted":
        return spec
    refusal = HTTPException(
        422,
        "model_name: a scripted model must name a file under api.model_scripts_dir "
        f"({'not set on this server' if folder is None else 'a folder of the server'})",
    )
    if folder is None or not path or "\0" in path:
        raise refusal
    base = folder.expanduser().resolve()
    try:
        resolved = (base / path).resolve()
    except (OSError, RuntimeError, ValueError):
        raise refusal from None
    if not resolved.is_relative_to(base) or resolved == base:
        raise refusal
    return f"scripted:{resolved}"


def _last_human(body: RunCreate) -> dict[str, Any] | None:
    messages = (body.input or {}).get("messages") or []
    if not isinstance(messages, list):
        raise HTTPException(422, "input.messages must be a list of messages")
    for message in reversed(messages):
        if isinstance(message, dict) and (message.get("role") or message.get("type")) in ("user", "human"):
            return message
    return None


def message_content(message: dict[str, Any]) -> str:
    """The message's text: a string, or its text blocks (its images: ``workers/api/images.py``)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    if not isinstance(content, str):
        raise HTTPException(422, "a message's content must be text or a list of text blocks")
    return content.strip()


def reply_for(
    body: RunCreate, pending: dict[str, Any] | None, current: status.Chain, max_chars: int
) -> ReplyInput | None:
    """The answer this request gives the pending clarification, or ``None`` when it gives none. A reply is
    bounded like a message (``run.max_message_chars``); a resume while another run holds the thread is 409."""
    reply = _reply(body, pending, current)
    if reply is not None:
        size = len(reply.answer or "") + len(reply.option_id or "") + len(json.dumps(reply.fields, default=str))
        if size > max_chars + 2:  # "{}": no fields
            raise HTTPException(
                422, f"the reply is about {size} characters; the limit is {max_chars} (run.max_message_chars)"
            )
    return reply


def _reply(body: RunCreate, pending: dict[str, Any] | None, current: status.Chain) -> ReplyInput | None:
    request_id = (pending or {}).get("request_id")
    if body.command is not None and "resume" in body.command:
        if pending is None and current.active:
            raise HTTPException(409, f"the thread is busy: a run is {current.status}, there is nothing to resume")
        if pending is None:
            raise HTTPException(400, "command.resume: the thread is not interrupted, there is nothing to resume")
        resume = body.command["resume"]
        if isinstance(resume, str):
            return ReplyInput(answer=resume, request_id=request_id)
        return ReplyInput(resume.get("answer"), resume.get("option_id"), dict(resume.get("fields") or {}), request_id)
    message = _last_human(body)
    if pending is None or message is None:
        return None
    response = (message.get("additional_kwargs") or {}).get("human_input_response")
    if isinstance(response, dict):
        if response.get("response_kind") == "option":
            return ReplyInput(
                option_id=str(response.get("option_id") or response.get("value")),
                request_id=_text_or_none(response.get("request_id")) or request_id,
            )
        return ReplyInput(
            answer=str(response.get("value") or ""), request_id=_text_or_none(response.get("request_id")) or request_id
        )
    return ReplyInput(answer=message_content(message), request_id=request_id)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_ANSWERED = (
    "the pause was answered already (by another request): the thread is no longer interrupted; read its state and runs"
)


async def _stream_offset(context: ApiContext, workflow_id: str) -> int:
    """Where the resumed segment starts in the run's stream; a run closed since it was read as paused (another
    request's reply resumed it and it ran to the end) rejects the query: 409, like the late reply itself."""
    try:
        return await WorkflowStreamClient.create(context.client, workflow_id).get_offset()
    except WorkflowQueryRejectedError:
        raise HTTPException(409, _ANSWERED) from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise HTTPException(409, _ANSWERED) from None


async def _answer(context: ApiContext, workflow_id: str, reply: ReplyInput | ReviewInput) -> None:
    """Send the reply (or a tool approval's review); a pause that another request answered first (many clients
    resuming at once) is 409."""
    try:
        if isinstance(reply, ReviewInput):
            await Runs(context.client).review(workflow_id, reply)
        else:
            await Runs(context.client).reply(workflow_id, reply)
    except ReplyRefused as exc:
        if exc.answered_already:
            raise HTTPException(409, f"{_ANSWERED}: {exc}") from None
        if exc.not_delivered:
            raise HTTPException(
                503, f"the run could not take the reply now, send it again: {exc}", headers={"Retry-After": "1"}
            ) from None
        raise HTTPException(422, f"reply refused: {exc}") from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise HTTPException(409, _ANSWERED) from None  # closed since: its last segment ran to the end


async def begin(context: ApiContext, thread: ThreadRef, body: RunCreate) -> records.RunRecord:
    """Start or resume the thread's workflow for this request and record the API run; refusals raise first."""
    agent = await run_agent(context, thread.user_id, body.assistant_id, body.option("agent_name"))
    body.modes()
    webhook = await run_webhook(context.config.webhooks, body.webhook)
    multitask.check_strategy(body.multitask_strategy)
    attached = await attached_files(context, thread, _last_human(body))
    ledger = context.ledger
    if not await ledger.thread_exists(thread):
        if body.if_not_exists != "create":
            raise HTTPException(404, f"thread {thread.thread_id} not found")
        await ledger.save_thread(thread, records.new_thread_record(thread, {}))
    current = await ledger.chain(thread)
    named = checkpoints.requested_id(body.checkpoint, body.checkpoint_id)
    fork = await forks.resolve(ledger, thread, named, _last_human(body))
    if fork is not None and current.active:
        raise HTTPException(409, f"thread {thread.thread_id} is busy: a run is {current.status}; a fork needs it idle")
    pending = await ledger.pending_request(thread, current) if fork is None else None
    max_chars = context.config.run.max_message_chars
    reply: ReplyInput | ReviewInput | None = None
    if is_approval(pending) and fork is None:
        assert pending is not None
        reply = approvals.review_for(body.command, pending, thread.user_id, max_chars, _last_human(body))
    else:
        reply = reply_for(body, pending, current, max_chars)
    if reply is not None:
        refuse_on_reply(body.webhook)
        assert current.first_run_id is not None and current.workflow_id is not None
        workflow_id = current.workflow_id  # a paused run started before ids were per user answers under its own
        offset = await _stream_offset(context, workflow_id)
        await _answer(context, workflow_id, reply)
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
    message = rerun or _last_human(body)
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
