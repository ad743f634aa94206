"""A thread's sandbox: acquire and release it, hash a file's current version for ReadBeforeWrite
(``activities/tools.py``), and what the sweeper sees of all of them (``activities/sandbox_sweeper.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef


@dataclass
class SandboxReleaseInput:
    thread: ThreadRef
    sandbox_id: str | None
    """``None``: the sandbox the worker's provider gives this thread (a run cancelled during its first sandbox
    call never learnt the id)."""


@dataclass
class SandboxAcquireInput:
    thread: ThreadRef


@dataclass
class SandboxAcquireResult:
    sandbox_id: str


@dataclass
class FileHashInput:
    """The file ``path`` (a virtual path, as ``read_file`` takes it) in the thread's sandbox."""

    thread: ThreadRef
    path: str
    sandbox_id: str | None = None
    run_key: str = ""


@dataclass
class FileHashResult:
    sha256: str | None
    """The sha256 of the whole current text as ``read_file`` reads it; ``None`` when it cannot be read (missing,
    binary, a sandbox error): the gate then lets the tool run and report its own error."""
    sandbox_id: str | None = None
    """The sandbox the read ran in (the thread's first sandbox call acquires it)."""
    sandbox_needs_release: bool = True
    """As ``ToolCallOutput.sandbox_needs_release``."""


@dataclass
class SandboxRecord:
    """One sandbox (a Kubernetes pod) as the sweeper and ``hartflow sandboxes list`` see it."""

    sandbox_id: str
    pod: str
    user_id: str
    thread_id: str
    workflow_id: str
    """The run workflow that acquired it; empty when unknown."""
    created_at: datetime | None
    ready: bool


@dataclass
class SandboxInventory:
    sandboxes: list[SandboxRecord]


@dataclass
class RunStatesInput:
    workflow_ids: list[str]


@dataclass
class RunStates:
    states: dict[str, Literal["running", "closed", "missing"]]
    """Per workflow id: its latest execution is running, has closed, or never existed."""


SANDBOX_ACQUIRE = ActivityRef("sandbox.acquire", SandboxAcquireInput, SandboxAcquireResult)
SANDBOX_RELEASE = ActivityRef("sandbox.release", SandboxReleaseInput, type(None))
SANDBOX_FILE_HASH = ActivityRef("sandbox.file_hash", FileHashInput, FileHashResult)
SANDBOX_INVENTORY = ActivityRef("sandbox.inventory", type(None), SandboxInventory)
"""Takes no argument: the sweeper workflow calls it without one."""
SANDBOX_RUN_STATES = ActivityRef("sandbox.run_states", RunStatesInput, RunStates)
