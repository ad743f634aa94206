"""Where a run's state comes from and goes to: the thread's stored state (``thread.load`` / ``thread.commit``),
or, in a continued run, what the previous execution carried (``workflows/run/carry.py``).

A subagent's state is its own (``RunProfile.owns_thread`` is false): seeded with its task's prompt and the lead
run's sandbox, never loaded nor committed.

The load is a local activity in runs started since :data:`patches.LOAD_LOCALLY`: it runs in the run's first
workflow task, with before_agent and the first model call's scheduling after it, instead of a workflow task of its
own after it (a regular activity is three history events and one more workflow-task round). A read is safe to run
again when that workflow task is retried. Commits stay regular activities: a local activity's input is computed
again by a retried workflow task (its clock moved), so a second attempt could store a different state than the
first one did; a scheduled activity's input is fixed in history. A run's final commit is mostly made by
``run.close`` together with its archive (``workflows/run/finish.py``), from :func:`commit_input`.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from langchain_core.messages import HumanMessage
from temporalio.common import RetryPolicy

import workflows.run.carry as carry
from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares.base import Middleware
from middlewares.context import ActivityOptions, RunContext
from middlewares.view_image import ATTACHED_IMAGES_KEY
from vocabulary.contracts import (
    THREAD_COMMIT,
    THREAD_LOAD,
    CommitLineage,
    ThreadCommitInput,
    ThreadLoadInput,
)
from vocabulary.paths import VIRTUAL_UPLOADS_DIR
from vocabulary.state import ThreadState
from workflows.run.fields import RunFields
from workflows.run.io import RunInput
from workflows.run.profile import RunProfile

_STORE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
)


async def start(
    input: RunInput, fields: RunFields, ctx: RunContext, chain: list[Middleware], profile: RunProfile
) -> None:
    """Put the state the run starts from in ``fields``: carried across continue-as-new, else loaded from the
    thread (its newest version, or ``input.base_version``'s for a fork; a subagent's: seeded), plus the user's
    message."""
    if input.carried is not None:
        carry.resume(input.carried, fields, chain)
        return
    if profile.owns_thread:
        snapshot = await call_activity(
            ctx,
            THREAD_LOAD,
            ThreadLoadInput(ctx.thread, input.base_version),
            summary="load thread state" if input.base_version is None else f"load version {input.base_version}",
            options=dataclasses.replace(_STORE_OPTIONS, local=True)
            if ctx.patched(patches.LOAD_LOCALLY)
            else _STORE_OPTIONS,
        )
        fields.version = snapshot.version
        fields.state = snapshot.state
        message = HumanMessage(content=input.message, id=input.message_id or ctx.uuid())
        if input.files:
            message.additional_kwargs["files"] = list(input.file_entries or input.files)
        if input.images:
            message.additional_kwargs[ATTACHED_IMAGES_KEY] = [f"{VIRTUAL_UPLOADS_DIR}/{name}" for name in input.images]
        parent = snapshot.version if input.base_version is None else input.base_version
        fields.lineage = CommitLineage(parent, message_id=message.id, input_of=input.rerun_of)
        if input.title:
            fields.apply({"title": input.title}, ctx.uuid)
    else:
        task = input.subagent
        sandbox = {"sandbox_id": task.sandbox_id} if task is not None and task.sandbox_id else None
        fields.state = ThreadState(sandbox=sandbox)
        message = HumanMessage(content=input.message, id=ctx.uuid())
    fields.apply({"messages": [message]}, ctx.uuid)


async def commit(fields: RunFields, ctx: RunContext, profile: RunProfile) -> None:
    """Store the fields' state as the thread's next version (a subagent commits nothing)."""
    request = commit_input(fields, ctx, profile)
    if request is None:
        return
    result = await call_activity(ctx, THREAD_COMMIT, request, summary="commit thread state", options=_STORE_OPTIONS)
    committed(fields, result.version)


def commit_input(fields: RunFields, ctx: RunContext, profile: RunProfile) -> ThreadCommitInput | None:
    """What the run's next commit stores: the fields' state as the version after theirs (``None``: a subagent)."""
    if not profile.owns_thread:
        return None
    return ThreadCommitInput(ctx.thread, fields.state, fields.version, ctx.run_id, fields.lineage)


def committed(fields: RunFields, version: int) -> None:
    """The fields' state is stored as ``version``."""
    fields.version = version
    fields.lineage = None  # the run's later commits grow from this one
