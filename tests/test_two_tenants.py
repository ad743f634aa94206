"""Every route and every thread command of the CLI, walked as the wrong user.

Alice builds a rich thread (metadata, an upload, a completed run that left a file in outputs, memory, and a second
run paused on a clarification: an interrupt, run records, state history, stored payloads). Then bob sends every
route of the app (read from ``create_app(...).routes`` at both prefixes, so a route added later is walked too)
with alice's thread id, run ids, checkpoint and file names, and bodies that would be valid for alice; and the
thread commands of the CLI with a config of his own (``user_id: bob``) on the same storage and Temporal.

Bob must not read, change, delete, block or detect anything of alice's (issue 24's "done when"):

* **read**: no response or command output of bob's carries anything of alice's (a secret in all she wrote, her run
  ids);
* **detect**: bob gets exactly what he gets for a thread id nobody has: every request is sent twice, once with
  alice's ids and once with ids nobody has (a *control*), and the answers must agree (the status; for a refusal
  the whole body, ids swapped). Bob's own state on the two ids is kept the same, so any difference is alice's;
* **change, delete**: every key of the store that is not bob's is unchanged after every request (its etag is a
  digest on S3, ``mtime-size`` on the filesystem), alice's workflow has the same run and history length, and at
  the end her thread, state, history, runs and every stored byte are what they were;
* **block**: alice's paused run still takes her answer afterwards and completes.

The walk runs twice: while bob has no thread of alice's name (phase ``none``), and while he has his own thread of
that name with an upload and a completed run (phase ``own``). A request that creates bob's own thread of the name
is allowed only for the routes of :data:`ROUTES` with a reason; while bob has no such thread, any other route must
refuse (4xx) and write nothing at all. Bob's side is restored after every request, so each starts from the phase's
state. Real server, worker, Temporal and storage (both backends); the model is scripted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from activities.memory_store import empty_memory, save_memory
from activities.storage import ObjectStore
from activities.storage.payloads import encode_segment
from activities.user_skills import SkillBundle, install
from tests.support import storage_settings, worker_and_api
from tests.support.tenants import as_user, bearer_api
from vocabulary.contracts import MEMORY_WORKFLOW_ID_PREFIX
from vocabulary.workflow_ids import legacy_run_workflow_id, run_workflow_id
from workers.api.app import PREFIXES, create_app
from workers.api.channels import LARK_WRITES
from workers.cli import run_command
from workers.cli.parser import COMMANDS
from workers.config import HartflowConfig, open_object_store
from workers.testing import (
    answer,
    ask_clarification,
    calls,
    make_config,
    tool_call,
    unique,
    write_script,
)

ALICE, BOB = "alice", "bob"
"""The user ids of this test (:func:`users_of_this_test`) for the roles ``alice`` and ``bob`` of
``tests/support/tenants.py``: a user's memory workflow (``hartflow-memory-{user}``) is one per Temporal namespace,
and the tests running beside this one on the same server have their own."""
UPLOAD = "brief.txt"
ARTIFACT = "report.md"


# -- what bob sends ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ids:
    """The ids a request names: alice's, or the control's (ids nobody has; the checkpoint and file names are
    alice's on both, as names a thread nobody has does not have either)."""

    thread_id: str
    run_ids: tuple[str, ...]
    checkpoint_id: str
    cron_id: str = ""
    """A schedule (``workers/api/crons.py``): alice's, on her thread, paused."""


@dataclass(frozen=True)
class Req:
    """One request: path parameters beyond ``thread_id``, and what it sends."""

    path: dict[str, str] = field(default_factory=dict)
    json: Any = None
    files: list[tuple[str, tuple[str, bytes]]] | None = None
    params: dict[str, str] | None = None
    headers: dict[str, str] | None = None


def message(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def per_run(ids: Ids, **options: Any) -> list[Req]:
    return [Req(path={"run_id": run_id}, **options) for run_id in ids.run_ids]


def run_bodies(ids: Ids) -> list[Req]:
    """What alice may send to her paused thread: the answer as a command, or as a message (which on a thread
    nobody has creates it, ``if_not_exists: create``)."""
    return [
        Req(json={"assistant_id": "hartflow", "command": {"resume": "blue"}}),
        Req(json={"assistant_id": "hartflow", "input": message("blue"), "if_not_exists": "create"}),
        Req(json={"assistant_id": "hartflow", "input": message("blue")}),
    ]


def bobs_agent(ids: Ids) -> str:
    """An agent name of bob's own for each side of the walk (both sides run at once: one name would conflict);
    it holds the side's thread id, so the two refusals compare equal once the ids are swapped."""
    return f"bob-{ids.thread_id}"


SETTINGS_OF_BOBS = "bob's own settings document (an agent, his MCP servers) under users/bob/: it names no thread"


CREATES_RUN = (
    "a run on a thread id the caller has not used, with if_not_exists: create, creates the caller's own thread of "
    "that name (thread ids are per user), and its workflow is hartflow:{caller}:{thread}"
)


OWN_MEMORY = "memory is per user: the change goes to the caller's own memory (users/{caller}/memory.json)"
ALICES_FACT = "fact_alice01"
ALICES_SKILL = "alices-skill"
"""Alice's memory fact and installed skill: bob names them and gets what he gets for names nobody has."""


@dataclass(frozen=True)
class Walk:
    """How a route is walked: the requests bob sends, and why (if at all) one may create bob's own thread of
    alice's thread id while he has none."""

    requests: Callable[[Ids], list[Req]]
    creates_own: str | None = None


BOBS_SCHEDULE = (
    "a schedule is the caller's own (hartflow:{caller}:schedule.{uuid}, in Temporal): it names the caller's own "
    "thread of that id, which must exist (or none: a new thread each fire), and writes no storage"
)
CRON = "0 0 1 1 *"


def per_cron(ids: Ids, **options: Any) -> list[Req]:
    return [Req(path={"cron_id": ids.cron_id}, **options)]


def per_task(ids: Ids, **options: Any) -> list[Req]:
    return [Req(path={"task_id": ids.cron_id}, **options)]


ROUTES: dict[tuple[str, str], Walk] = {
    ("GET", "/ok"): Walk(lambda ids: [Req()]),
    ("GET", "/info"): Walk(lambda ids: [Req()]),
    ("GET", "/openapi.json"): Walk(lambda ids: [Req()]),
    ("GET", "/models"): Walk(lambda ids: [Req()]),
    ("POST", "/assistants/search"): Walk(lambda ids: [Req(json={"graph_id": "hartflow"})]),
    ("GET", "/assistants/{assistant_id}"): Walk(lambda ids: [Req(path={"assistant_id": "hartflow"})]),
    # Settings (tests/test_settings_agents.py proves them per user): bob's own documents, under users/bob/.
    ("POST", "/assistants"): Walk(
        lambda ids: [Req(json={"graph_id": "lead_agent", "assistant_id": bobs_agent(ids)})],
        creates_own=SETTINGS_OF_BOBS,
    ),
    ("PATCH", "/assistants/{assistant_id}"): Walk(
        lambda ids: [Req(path={"assistant_id": bobs_agent(ids)}, json={"context": {"soul": "bob's"}})]
    ),
    ("DELETE", "/assistants/{assistant_id}"): Walk(lambda ids: [Req(path={"assistant_id": bobs_agent(ids)})]),
    ("GET", "/mcp/config"): Walk(lambda ids: [Req()]),
    ("PUT", "/mcp/config"): Walk(lambda ids: [Req(json={"mcp_servers": {}})], creates_own=SETTINGS_OF_BOBS),
    ("PATCH", "/mcp/config"): Walk(lambda ids: [Req(json={"server_name": "nobodys", "enabled": False})]),
    ("GET", "/agents"): Walk(lambda ids: [Req()]),
    ("GET", "/agents/check"): Walk(lambda ids: [Req(params={"name": bobs_agent(ids)})]),
    ("POST", "/agents"): Walk(
        lambda ids: [Req(json={"name": bobs_agent(ids), "soul": "bob's"})], creates_own=SETTINGS_OF_BOBS
    ),
    ("GET", "/agents/{name}"): Walk(lambda ids: [Req(path={"name": bobs_agent(ids)})]),
    ("PUT", "/agents/{name}"): Walk(lambda ids: [Req(path={"name": bobs_agent(ids)}, json={"soul": "bob's"})]),
    ("DELETE", "/agents/{name}"): Walk(lambda ids: [Req(path={"name": bobs_agent(ids)})]),
    ("POST", "/threads"): Walk(
        lambda ids: [
            Req(json={"thread_id": ids.thread_id, "metadata": {"owner": "bob"}}),
            Req(json={"thread_id": ids.thread_id, "if_exists": "do_nothing"}),
        ],
        creates_own="a thread id names one of the caller's own threads: DeerFlow's frontend picks the id of a new "
        "chat itself, so any id is free for anyone",
    ),
    ("POST", "/threads/search"): Walk(
        lambda ids: [Req(json={"ids": [ids.thread_id]}), Req(json={"metadata": {"owner": "alice"}}), Req(json={})]
    ),
    ("GET", "/threads/{thread_id}"): Walk(lambda ids: [Req()]),
    ("PATCH", "/threads/{thread_id}"): Walk(lambda ids: [Req(json={"metadata": {"owner": "bob"}})]),
    ("DELETE", "/threads/{thread_id}"): Walk(lambda ids: [Req()]),
    ("GET", "/threads/{thread_id}/state"): Walk(lambda ids: [Req()]),
    ("GET", "/threads/{thread_id}/state/{checkpoint_id}"): Walk(
        lambda ids: [Req(path={"checkpoint_id": ids.checkpoint_id}), Req(path={"checkpoint_id": "v1"})]
    ),
    ("POST", "/threads/{thread_id}/history"): Walk(lambda ids: [Req(json={"limit": 10})]),
    ("POST", "/threads/{thread_id}/state"): Walk(
        lambda ids: [
            Req(json={"values": {"title": "bob's"}}),
            Req(json={"values": {"title": "bob's"}, "checkpoint_id": ids.checkpoint_id}),
        ]
    ),
    ("POST", "/threads/{thread_id}/copy"): Walk(lambda ids: [Req()]),
    ("POST", "/threads/{thread_id}/branches"): Walk(lambda ids: [Req(json={"message_id": "m", "message_ids": ["m"]})]),
    ("POST", "/threads/{thread_id}/runs/regenerate/prepare"): Walk(lambda ids: [Req(json={"message_id": "m"})]),
    ("POST", "/threads/{thread_id}/runs/edit-regenerate/prepare"): Walk(
        lambda ids: [Req(json={"human_message_id": "m", "replacement_text": "bob's"})]
    ),
    ("POST", "/threads/{thread_id}/runs"): Walk(run_bodies, creates_own=CREATES_RUN),
    ("POST", "/threads/{thread_id}/runs/stream"): Walk(run_bodies, creates_own=CREATES_RUN),
    ("POST", "/threads/{thread_id}/runs/wait"): Walk(run_bodies, creates_own=CREATES_RUN),
    ("GET", "/threads/{thread_id}/runs"): Walk(lambda ids: [Req(), Req(params={"status": "success", "limit": "5"})]),
    ("GET", "/threads/{thread_id}/runs/{run_id}"): Walk(per_run),
    ("GET", "/threads/{thread_id}/runs/{run_id}/join"): Walk(per_run),
    ("GET", "/threads/{thread_id}/runs/{run_id}/stream"): Walk(
        lambda ids: per_run(ids) + per_run(ids, headers={"Last-Event-ID": "0-0"})
    ),
    ("GET", "/threads/{thread_id}/runs/{run_id}/events"): Walk(
        lambda ids: per_run(ids) + per_run(ids, params={"event_types": "subagent.step", "task_id": "t1"})
    ),
    ("GET", "/threads/{thread_id}/runs/{run_id}/workspace-changes"): Walk(
        lambda ids: per_run(ids, params={"include_files": "true", "include_diff": "false"})
    ),
    ("GET", "/threads/{thread_id}/token-usage"): Walk(lambda ids: [Req()]),
    ("POST", "/threads/{thread_id}/runs/{run_id}/cancel"): Walk(
        lambda ids: per_run(ids) + per_run(ids, params={"wait": "true"})
    ),
    ("POST", "/threads/{thread_id}/uploads"): Walk(
        lambda ids: [Req(files=[("files", (UPLOAD, b"bob's brief")), ("files", ("other.txt", b"bob's other"))])],
        creates_own="uploads may precede the thread (DeerFlow's frontend uploads a new chat's files first): they "
        "go to the caller's own thread of that name",
    ),
    ("GET", "/threads/{thread_id}/uploads/list"): Walk(lambda ids: [Req()]),
    ("GET", "/threads/{thread_id}/uploads/limits"): Walk(
        lambda ids: [Req()],
        creates_own="answered for any thread id, creating nothing: the limits are the deployment's (api.uploads) "
        "and DeerFlow's frontend asks before a new chat's first upload",
    ),
    ("GET", "/threads/{thread_id}/messages/page"): Walk(
        lambda ids: [Req(), Req(params={"limit": "2", "before_seq": "3"})]
    ),
    ("DELETE", "/threads/{thread_id}/uploads/{name}"): Walk(lambda ids: [Req(path={"name": UPLOAD})]),
    ("GET", "/threads/{thread_id}/artifacts/{path:path}"): Walk(
        lambda ids: [
            Req(path={"path": f"mnt/user-data/outputs/{ARTIFACT}"}),
            Req(path={"path": ARTIFACT}, params={"download": "true"}),
        ]
    ),
    ("POST", "/input-polish"): Walk(
        lambda ids: [Req(json={"text": "polish this", "thread_id": ids.thread_id})],
        creates_own="no thread is read or written: the caller's own one-shot workflow (hartflow:{caller}:"
        "input_polish.{hex}) asks the model, and only its payloads are stored",
    ),
    ("GET", "/suggestions/config"): Walk(lambda ids: [Req()]),
    ("POST", "/threads/{thread_id}/suggestions"): Walk(
        lambda ids: [Req(json={"messages": [{"role": "user", "content": "hi"}], "n": 3})]
    ),
    ("GET", "/features"): Walk(lambda ids: [Req()]),
    ("GET", "/channels/providers"): Walk(lambda ids: [Req()]),
    ("GET", "/channels/connections"): Walk(lambda ids: [Req()]),
    ("POST", "/channels/{provider}/connect"): Walk(lambda ids: [Req(path={"provider": "telegram"})]),
    ("POST", "/channels/{provider}/runtime-config"): Walk(
        lambda ids: [Req(path={"provider": "slack"}, json={"values": {"bot_token": "t"}})]
    ),
    ("DELETE", "/channels/{provider}/runtime-config"): Walk(lambda ids: [Req(path={"provider": "slack"})]),
    ("DELETE", "/channels/connections/{connection_id}"): Walk(lambda ids: [Req(path={"connection_id": "c1"})]),
    ("GET", "/integrations/lark/status"): Walk(lambda ids: [Req()]),
    **{("POST", f"/integrations/lark/{step}"): Walk(lambda ids: [Req(json={})]) for step in LARK_WRITES},
    **{
        (method, path): Walk(lambda ids: [Req()])
        for method, path in (("GET", "/memory"), ("GET", "/memory/export"), ("POST", "/memory/reload"))
    },
    ("DELETE", "/memory"): Walk(lambda ids: [Req()], creates_own=OWN_MEMORY),
    ("POST", "/memory/facts"): Walk(
        lambda ids: [Req(json={"content": f"bob's fact {ids.thread_id}", "confidence": 0.9})], creates_own=OWN_MEMORY
    ),
    ("PATCH", "/memory/facts/{fact_id}"): Walk(lambda ids: [Req(path={"fact_id": ALICES_FACT}, json={"content": "x"})]),
    ("DELETE", "/memory/facts/{fact_id}"): Walk(lambda ids: [Req(path={"fact_id": ALICES_FACT})]),
    ("POST", "/memory/import"): Walk(lambda ids: [Req(json={"facts": []})], creates_own=OWN_MEMORY),
    ("GET", "/skills"): Walk(lambda ids: [Req()]),
    ("GET", "/skills/{skill_name}"): Walk(lambda ids: [Req(path={"skill_name": ALICES_SKILL})]),
    ("PUT", "/skills/{skill_name}"): Walk(
        lambda ids: [Req(path={"skill_name": ALICES_SKILL}, json={"enabled": False})]
    ),
    ("POST", "/skills/install"): Walk(
        lambda ids: [Req(json={"thread_id": ids.thread_id, "path": f"mnt/user-data/outputs/{ALICES_SKILL}.skill"})]
    ),
    ("DELETE", "/skills/custom/{skill_name}"): Walk(lambda ids: [Req(path={"skill_name": ALICES_SKILL})]),
    ("POST", "/runs/crons"): Walk(
        lambda ids: [Req(json={"schedule": CRON, "input": message("bob's"), "enabled": False})],
        creates_own=BOBS_SCHEDULE,
    ),
    ("POST", "/threads/{thread_id}/runs/crons"): Walk(
        lambda ids: [Req(json={"schedule": CRON, "input": message("bob's"), "enabled": False})],
        creates_own=BOBS_SCHEDULE,
    ),
    ("POST", "/runs/crons/search"): Walk(lambda ids: [Req(json={}), Req(json={"thread_id": ids.thread_id})]),
    ("POST", "/runs/crons/count"): Walk(lambda ids: [Req(json={"thread_id": ids.thread_id})]),
    ("GET", "/runs/crons/{cron_id}"): Walk(per_cron),
    ("PATCH", "/runs/crons/{cron_id}"): Walk(lambda ids: per_cron(ids, json={"enabled": True})),
    ("DELETE", "/runs/crons/{cron_id}"): Walk(per_cron),
    ("POST", "/runs/crons/{cron_id}/trigger"): Walk(per_cron),
    ("GET", "/scheduled-tasks"): Walk(lambda ids: [Req()]),
    ("POST", "/scheduled-tasks"): Walk(
        lambda ids: [
            Req(
                json={
                    "context_mode": "reuse_thread",
                    "thread_id": ids.thread_id,
                    "title": "bob's",
                    "prompt": "bob's",
                    "schedule_type": "cron",
                    "schedule_spec": {"cron": CRON},
                    "timezone": "UTC",
                }
            )
        ],
        creates_own=BOBS_SCHEDULE,
    ),
    ("GET", "/scheduled-tasks/{task_id}"): Walk(per_task),
    ("PATCH", "/scheduled-tasks/{task_id}"): Walk(lambda ids: per_task(ids, json={"title": "bob's"})),
    ("DELETE", "/scheduled-tasks/{task_id}"): Walk(per_task),
    ("POST", "/scheduled-tasks/{task_id}/pause"): Walk(per_task),
    ("POST", "/scheduled-tasks/{task_id}/resume"): Walk(per_task),
    ("POST", "/scheduled-tasks/{task_id}/trigger"): Walk(per_task),
    ("GET", "/scheduled-tasks/{task_id}/runs"): Walk(per_task),
    ("GET", "/threads/{thread_id}/scheduled-tasks"): Walk(lambda ids: [Req()]),
}
"""Every route of the app (without its prefix), classified. A route missing here fails the test."""


@dataclass(frozen=True)
class Command:
    """How a CLI command is walked: the argument lists bob runs for a thread id (and a file he uploads), why one
    may create bob's own thread of alice's id, or why the command is not walked at all."""

    argvs: Callable[[str, Path], list[list[str]]] | None = None
    creates_own: str | None = None
    not_walked: str | None = None


CLI: dict[str, Command] = {
    "run": Command(
        lambda thread, _: [["run", "hello", "--thread", thread, "--detach", "--json"]],
        creates_own="a run on a thread id the user has not used starts his own thread of that name "
        "(hartflow:{user}:{thread})",
    ),
    "upload": Command(
        lambda thread, file: [["upload", thread, str(file), "--json"]],
        creates_own="uploads go to the user's own thread of that name, as before its first run",
    ),
    "reply": Command(
        lambda thread, _: [
            ["reply", thread, "blue", "--json"],
            ["reply", thread, "--option", "2", "--json"],
            ["reply", thread, "blue", "--signal", "--json"],
        ]
    ),
    "approve": Command(
        lambda thread, _: [["approve", thread, "--json"], ["approve", thread, "--call", "c1", "--json"]]
    ),
    "reject": Command(lambda thread, _: [["reject", thread, "--reason", "no", "--json"]]),
    "cancel": Command(lambda thread, _: [["cancel", thread, "--json"]]),
    "status": Command(lambda thread, _: [["status", thread, "--json"]]),
    "state": Command(lambda thread, _: [["state", thread, "--json"]]),
    "events": Command(lambda thread, _: [["events", thread], ["events", thread, "--follow"]]),
    "runs": Command(
        lambda thread, _: [
            ["runs", "--thread", thread, "--json"],
            ["runs", "--status", "awaiting_input", "--json"],
            ["runs", "--awaiting", "approval", "--json"],
        ]
    ),
    "threads": Command(
        lambda thread, _: [["threads", "delete", thread, "--yes", "--json"], ["threads", "list", "--json"]]
    ),
    "worker": Command(not_walked="a process serving the task queue: names no thread, reads no user's data"),
    "dev": Command(not_walked="the embedded stack in the foreground: names no thread"),
    "serve": Command(not_walked="the API: every route of it is walked above"),
    "demo": Command(not_walked="a scripted run on a new thread of its own, of the config's user"),
    "sandboxes": Command(not_walked="Kubernetes pods (an operator's command): no thread data"),
    "skills": Command(
        lambda thread, _: [
            ["skills", "list", "--json"],
            ["skills", "disable", ALICES_SKILL, "--json"],
            ["skills", "delete", ALICES_SKILL, "--yes", "--json"],
        ]
    ),
    "memory": Command(
        lambda thread, _: [
            ["memory", "show", "--json"],
            ["memory", "export"],
            ["memory", "delete", ALICES_FACT, "--json"],
            ["memory", "edit", ALICES_FACT, "--content", "mine", "--json"],
        ]
    ),
    "tools": Command(not_walked="the tools a run gets: no user's data"),
    "mcp": Command(lambda thread, _: [["mcp", "show", "--json"], ["mcp", "disable", "nobodys", "--json"]]),
    "agents": Command(lambda thread, _: [["agents", "list", "--json"], ["agents", "show", "bob-x", "--json"]]),
    "schedule": Command(
        lambda thread, _: [
            ["schedule", "list", "--json"],
            ["schedule", "create", "hi", "--thread", thread, "--cron", CRON, "--paused", "--json"],
        ],
        creates_own=BOBS_SCHEDULE,
    ),
}
"""Every command of the CLI (``workers/cli/parser.py``), classified. A command missing here fails the test."""


_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def app_routes(config: HartflowConfig, client: Client) -> list[tuple[str, str, str]]:
    """(method, path with its prefix, path without it) of every route the app serves."""
    found = []
    # FastAPI keeps included routers as such in ``app.routes``: iter_route_contexts flattens them, prefixes on.
    for route in iter_route_contexts(create_app(config, client).routes):
        path, methods = route.path, route.methods
        assert path is not None and methods is not None, f"a route of no path or method: {route}"
        prefix = next(p for p in sorted(PREFIXES, key=len, reverse=True) if path.startswith(p + "/"))
        for method in sorted(methods - {"HEAD"}):
            found.append((method, path, path[len(prefix) :]))
    return found


def fill(template: str, ids: Ids, req: Req) -> str:
    values = {"thread_id": ids.thread_id, **req.path}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in values, f"no value for {{{name}}} in {template}: say in ROUTES what bob sends"
        return values[name]

    return _PARAM.sub(value, template)


# -- the world ----------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def users_of_this_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ALICE", unique("alice"))
    monkeypatch.setattr(sys.modules[__name__], "BOB", unique("bob"))


@pytest.fixture(params=["filesystem", "s3"])
def storage_backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    return storage_settings(request, request.param)


@pytest.fixture
def secret() -> str:
    """In everything alice writes: no answer to bob may contain it."""
    return unique("alicesecret")


@pytest.fixture
def api_config(home: Path, temporal_address: str, storage_backend: dict[str, Any], tmp_path: Path) -> HartflowConfig:
    return make_config(
        home,
        temporal_address,
        # What a run without a model_name gets (bob's runs), and what bob's input polish and suggestions get.
        model=write_script(
            tmp_path,
            [answer("fine"), {**answer("fine"), "for": "input_polish"}, {**answer('["ok?"]'), "for": "suggestions"}],
        ),
        storage={**storage_backend, "payload_threshold_bytes": 1024},  # most payloads in storage, none lost
        api=bearer_api(tmp_path, users={"alice": ALICE, "bob": BOB}),
        # No memory extraction: it would change alice's memory while bob walks. Injection stays on, so a run of
        # bob's would show alice's memory if it read hers.
        run={"middlewares": {"memory": {"enabled": False}}},
    )


def is_bobs(key: str) -> bool:
    """A key bob's requests may create or change: his user folder, the payloads of his own workflows."""
    runs, memory = (
        f"/wi/{encode_segment(f'hartflow:{BOB}:')}",
        f"/wi/{encode_segment(MEMORY_WORKFLOW_ID_PREFIX + BOB)}/",
    )
    return key.startswith(f"users/{BOB}/") or runs in key or memory in key


def keys(store: ObjectStore) -> dict[str, str]:
    """Every key of the store with its etag."""
    return {info.key: info.etag for prefix in ("users/", "payloads/") for info in store.list(prefix)}


def contents(store: ObjectStore, of: dict[str, str]) -> dict[str, bytes | None]:
    return {key: store.get(key) for key in of}


async def workflow(client: Client, workflow_id: str) -> tuple[str, str, int] | None:
    """(run id, status, history length) of the workflow's latest run; ``None`` when there is none."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    assert described.status is not None
    return described.run_id, described.status.name, described.history_length


async def closed(client: Client, workflow_id: str) -> None:
    """Wait until bob's workflow of that id (if any) is closed: his runs only answer, so each one ends."""
    if (found := await workflow(client, workflow_id)) is not None and found[1] == "RUNNING":
        with contextlib.suppress(WorkflowFailureError):
            await client.get_workflow_handle(workflow_id).result()


@dataclass
class Alice:
    thread_id: str
    run_ids: tuple[str, str]
    checkpoint_id: str
    views: dict[str, Any]
    workflow_run_ids: set[str]
    """Temporal's run ids of her thread's workflow."""
    cron_id: str = ""


async def alices_views(api: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    """What alice sees of her thread through the API."""
    views = {}
    for name, request in {
        "thread": api.get(f"/threads/{thread_id}"),
        "state": api.get(f"/threads/{thread_id}/state"),
        "history": api.post(f"/threads/{thread_id}/history", json={"limit": 100}),
        "runs": api.get(f"/threads/{thread_id}/runs", params={"limit": 100}),
        "uploads": api.get(f"/threads/{thread_id}/uploads/list"),
        "artifact": api.get(f"/threads/{thread_id}/artifacts/{ARTIFACT}"),
        "schedules": api.post("/runs/crons/search", json={"thread_id": thread_id}),
    }.items():
        response = await request
        assert response.status_code == 200, (name, response.text)
        views[name] = response.text
    return views


async def build_alices_thread(url: str, config: HartflowConfig, secret: str, tmp_path: Path) -> Alice:
    write_report = write_script(
        tmp_path,
        [
            calls(tool_call("write_file", path=f"/mnt/user-data/outputs/{ARTIFACT}", content=f"{secret} report")),
            answer(f"{secret} the report is in outputs"),
        ],
    )
    ask = write_script(
        tmp_path, [ask_clarification(f"{secret} which colour?", options=["red", "blue"]), answer(f"{secret} all blue")]
    )
    memory = empty_memory()
    memory["user"]["workContext"]["summary"] = f"{secret} works on the quarterly report"
    memory["facts"] = [{"id": ALICES_FACT, "content": f"{secret} fact", "category": "context", "confidence": 0.9}]
    save_memory(open_object_store(config), ALICE, memory)
    skill = SkillBundle(
        ALICES_SKILL, f"{secret} skill", {"SKILL.md": f"---\nname: {ALICES_SKILL}\ndescription: x\n---\n".encode()}
    )
    install(open_object_store(config), ALICE, skill, deployment=[])
    async with as_user(url, "alice") as api:
        created = await api.post("/threads", json={"metadata": {"owner": "alice", "secret": secret}})
        thread_id = created.json()["thread_id"]
        sent = await api.post(f"/threads/{thread_id}/uploads", files={"files": (UPLOAD, f"{secret} brief".encode())})
        assert sent.status_code == 200, sent.text
        run_ids = []
        for text, model in ((f"{secret} write the report", write_report), (f"{secret} paint it", ask)):
            done = await api.post(
                f"/threads/{thread_id}/runs/wait", json={"input": message(text), "context": {"model_name": model}}
            )
            assert done.status_code == 200, done.text
            run_ids.append(done.headers["content-location"].rsplit("/", 1)[1])
        state = (await api.get(f"/threads/{thread_id}/state")).json()
        assert state["next"] == ["ask_clarification"], "alice's second run is paused on her clarification"
        cron = await api.post(
            f"/threads/{thread_id}/runs/crons",
            json={"schedule": CRON, "input": message(f"{secret} scheduled"), "enabled": False},
        )
        assert cron.status_code == 200, cron.text
        await _listed(api, thread_id)
        views = await alices_views(api, thread_id)
    assert f"{secret} report" in views["artifact"]
    store = open_object_store(config)
    runs = store.list(f"users/{ALICE}/threads/{thread_id}/api/runs/")
    records = [json.loads(store.get(info.key) or b"{}") for info in runs]
    return Alice(
        thread_id,
        (run_ids[0], run_ids[1]),
        state["checkpoint"]["checkpoint_id"],
        views,
        {record["workflow_run_id"] for record in records},
        cron.json()["cron_id"],
    )


async def _listed(api: httpx.AsyncClient, thread_id: str) -> None:
    """Until Temporal lists alice's new schedule (its list is eventually consistent)."""
    for _ in range(500):
        if (await api.post("/runs/crons/search", json={"thread_id": thread_id})).json():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("alice's schedule was never listed")


# -- the walk -----------------------------------------------------------------------------------------------------


@dataclass
class Sent:
    method: str
    path: str
    status: int
    text: str


async def send(api: httpx.AsyncClient, method: str, template: str, ids: Ids, req: Req) -> Sent:
    path = fill(template, ids, req)
    response = await api.request(method, path, json=req.json, files=req.files, params=req.params, headers=req.headers)
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    return Sent(method, path, response.status_code, f"{headers}\n\n{response.text}")


class Walker:
    """Bob's side of the walk: his state on alice's thread id and on the control's kept alike, and restored after
    every request; alice's keys and workflow checked after every request."""

    def __init__(self, config: HartflowConfig, client: Client, url: str, alice: Alice, secret: str) -> None:
        self.config = config
        self.client = client
        self.url = url
        self.store = open_object_store(config)
        self.alice = alice
        self.secret = secret
        self.alice_ids = Ids(alice.thread_id, alice.run_ids, alice.checkpoint_id, alice.cron_id)
        self.control = Ids(
            unique("nobodys"), (str(uuid.uuid4()), str(uuid.uuid4())), alice.checkpoint_id, str(uuid.uuid4())
        )
        self.alices_workflow = run_workflow_id(ALICE, alice.thread_id)
        self.bobs_baseline: dict[str, bytes] = {}
        self.listing: dict[str, str] = {}
        """Every key of the store with its etag, as the next request finds it."""
        self.walked = 0
        self.alices_strings = [secret, *alice.run_ids, *alice.workflow_run_ids, f"hartflow:{ALICE}:"]

    def refusal(self, sent: Sent, *, alices: bool) -> str:
        """What a refusal says, to compare the two: alice's ids in it replaced by the control's, and any other id
        (bob's own runs, which differ between the two threads) by a placeholder."""
        text = sent.text.split("\n\n", 1)[1] if sent.method != "hartflow" else sent.text
        if alices:
            text = text.replace(self.alice.thread_id, self.control.thread_id)
            for mine, theirs in zip(self.alice.run_ids, self.control.run_ids, strict=True):
                text = text.replace(mine, theirs)
        named = {self.control.thread_id, *self.control.run_ids}
        return _UUID.sub(lambda match: match.group() if match.group() in named else "<id>", text)

    def assert_nothing_of_alices(self, what: str, sent: Sent) -> None:
        """Nothing alice wrote, none of her ids bob did not name himself."""
        for text in (t for t in self.alices_strings if t not in sent.path):  # bob may hear the id he named
            assert text not in sent.text, f"{what} shows alice's {text}:\n{sent.text}"

    def bobs(self, listing: dict[str, str]) -> dict[str, str]:
        return {key: etag for key, etag in listing.items() if key.startswith(f"users/{BOB}/")}

    async def settle_bob(self) -> None:
        await asyncio.gather(
            *(closed(self.client, run_workflow_id(BOB, ids.thread_id)) for ids in (self.alice_ids, self.control))
        )

    def restore_bob(self, listing: dict[str, str]) -> None:
        """Bob's folder as the phase began (his workflows stay: they are alike on both ids)."""
        if self.bobs(listing) == self.bobs(self.listing):
            self.listing = listing
            return
        self.store.delete_prefix(f"users/{BOB}/")
        for key, data in self.bobs_baseline.items():
            self.store.put(key, data)
        self.listing = keys(self.store)

    async def give_bob_his_own_threads(self) -> None:
        """Phase ``own``: bob's own thread of alice's name (and of the control's), with an upload and a run."""
        async with as_user(self.url, "bob") as api:
            for ids in (self.alice_ids, self.control):
                made = await api.post("/threads", json={"thread_id": ids.thread_id, "metadata": {"owner": "bob"}})
                assert made.status_code == 200, made.text
                sent = await api.post(f"/threads/{ids.thread_id}/uploads", files={"files": (UPLOAD, b"bob's")})
                assert sent.status_code == 200, sent.text
                ran = await api.post(f"/threads/{ids.thread_id}/runs/wait", json={"input": message("hi")})
                assert ran.status_code == 200 and self.secret not in ran.text, ran.text
        await self.settle_bob()
        self.bobs_baseline = {info.key: self.store.get(info.key) or b"" for info in self.store.list(f"users/{BOB}/")}
        self.listing = keys(self.store)

    async def walk(self, phase: str, routes: list[tuple[str, str, str]]) -> None:
        self.listing = keys(self.store)
        async with as_user(self.url, "bob") as api:
            for method, template, bare in routes:
                walk = ROUTES[(method, bare)]
                for alices, controls in zip(walk.requests(self.alice_ids), walk.requests(self.control), strict=True):
                    await self.one(api, phase, method, template, walk, alices, controls)

    async def one(
        self, api: httpx.AsyncClient, phase: str, method: str, template: str, walk: Walk, alices: Req, controls: Req
    ) -> None:
        before = self.listing
        alices_run = await workflow(self.client, self.alices_workflow)
        on_alices, on_control = await asyncio.gather(
            send(api, method, template, self.alice_ids, alices), send(api, method, template, self.control, controls)
        )
        await self.settle_bob()
        after = keys(self.store)
        what = f"[{phase}] bob's {method} {on_alices.path}"
        self.walked += 1

        for sent in (on_alices, on_control):
            assert sent.status < 500, f"{what}: {sent.status}\n{sent.text}"
        self.assert_nothing_of_alices(what, on_alices)
        assert on_alices.status == on_control.status, (
            f"{what}: {on_alices.status}, but {on_control.status} on a thread nobody has: alice's is detected\n"
            f"{on_alices.text}\n---\n{on_control.text}"
        )
        if not 200 <= on_alices.status < 300:
            assert self.refusal(on_alices, alices=True) == self.refusal(on_control, alices=False), what
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert all(is_bobs(key) for key in changed), f"{what} changed keys that are not bob's: {sorted(changed)}"
        assert await workflow(self.client, self.alices_workflow) == alices_run, f"{what} touched alice's workflow"
        if phase == "none" and walk.creates_own is None:
            assert not 200 <= on_alices.status < 300 or "{thread_id}" not in template, (
                f"{what} answered {on_alices.status} for a thread bob does not have:\n{on_alices.text}"
            )
            assert not changed, f"{what} wrote for a thread bob does not have: {sorted(changed)}"
        self.restore_bob(after)

    async def walk_cli(self, capsys: pytest.CaptureFixture[str], home: Path, storage: dict[str, Any]) -> None:
        """Every thread command of the CLI as bob (his own config: same storage, Temporal and task queue)."""
        config_file = home.parent / "bob.yaml"
        dumped = self.config.model_dump(mode="json", exclude_none=True)
        dumped["storage"].update(storage)  # a dump masks the S3 secret
        config_file.write_text(json.dumps({**dumped, "user_id": BOB}), encoding="utf-8")
        upload = home.parent / UPLOAD
        upload.write_text("bob's brief")
        self.listing = keys(self.store)
        for command in CLI.values():
            if command.argvs is None:
                continue
            pairs = zip(
                command.argvs(self.alice.thread_id, upload), command.argvs(self.control.thread_id, upload), strict=True
            )
            for alices, controls in pairs:
                before = self.listing
                alices_run = await workflow(self.client, self.alices_workflow)
                on_alices = await self.hartflow(capsys, config_file, alices)
                on_control = await self.hartflow(capsys, config_file, controls)
                await self.settle_bob()
                after = keys(self.store)
                what = f"bob's hartflow {on_alices.path}"
                self.walked += 1
                self.assert_nothing_of_alices(what, on_alices)
                assert on_alices.status == on_control.status, (
                    f"{what}: exit {on_alices.status}, but {on_control.status} on a thread nobody has: alice's is "
                    f"detected\n{on_alices.text}\n---\n{on_control.text}"
                )
                if on_alices.status != 0:
                    assert self.refusal(on_alices, alices=True) == self.refusal(on_control, alices=False), what
                changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
                assert all(is_bobs(k) for k in changed), f"{what} changed keys that are not bob's: {sorted(changed)}"
                if command.creates_own is None:
                    assert after.keys() <= before.keys(), f"{what} wrote for a thread bob does not have"
                assert await workflow(self.client, self.alices_workflow) == alices_run, f"{what} touched alice's run"
                self.restore_bob(after)

    async def hartflow(self, capsys: pytest.CaptureFixture[str], config_file: Path, argv: list[str]) -> Sent:
        """One CLI command in this process (``run_command``, as ``hartflow`` runs it): its exit code and output."""
        capsys.readouterr()
        code = await asyncio.to_thread(run_command, [*argv, "--config", str(config_file)])
        out = capsys.readouterr()
        errors = "\n".join(line for line in out.err.splitlines() if line.startswith("hartflow: "))
        return Sent("hartflow", " ".join(argv), code, f"{out.out}\n{errors}" if code else out.out + out.err)


async def visible(client: Client, workflow_id: str) -> None:
    """Wait until Temporal's visibility (eventually consistent) lists the workflow, so that a command reading it
    would see alice's run if it showed other users' runs."""
    for _ in range(200):
        if [execution async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"')]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"visibility never listed {workflow_id}")


async def test_bob_walks_every_route_and_command_and_learns_nothing_of_alices_thread(
    api_config: HartflowConfig,
    client: Client,
    secret: str,
    tmp_path: Path,
    home: Path,
    storage_backend: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    routes = app_routes(api_config, client)
    unclassified = sorted({(m, bare) for m, _, bare in routes} - set(ROUTES))
    assert not unclassified, f"routes not classified in ROUTES (say what bob sends to them): {unclassified}"
    stale = sorted(set(ROUTES) - {(m, bare) for m, _, bare in routes})
    assert not stale, f"ROUTES names routes the app does not serve: {stale}"
    assert {command.name for command in COMMANDS} == set(CLI), "classify every CLI command in CLI"
    if api_config.storage.backend != "filesystem":
        # A prefix mounts the same handlers again: the filesystem walk takes both, this one the /api layout only.
        routes = [route for route in routes if route[1].startswith("/api/")]

    # The server's client has the config's claim check: payloads over the threshold are stored.
    async with worker_and_api(api_config, client) as url:
        alice = await build_alices_thread(url, api_config, secret, tmp_path)
        store = open_object_store(api_config)
        alices_keys = {key: etag for key, etag in keys(store).items() if not is_bobs(key)}
        alices_bytes = contents(store, alices_keys)
        alices_workflow = run_workflow_id(ALICE, alice.thread_id)
        alices_run = await workflow(client, alices_workflow)
        assert alices_run is not None and alices_run[1] == "RUNNING"
        await visible(client, alices_workflow)

        walker = Walker(api_config, client, url, alice, secret)
        await walker.walk("none", routes)
        await walker.walk_cli(capsys, home, storage_backend)
        await walker.give_bob_his_own_threads()
        await walker.walk("own", routes)

        assert {key for key in keys(store) if not is_bobs(key)} == alices_keys.keys()
        assert contents(store, alices_keys) == alices_bytes
        assert await workflow(client, alices_workflow) == alices_run
        assert await workflow(client, legacy_run_workflow_id(alice.thread_id)) is None
        queue = f'TaskQueue = "{api_config.temporal.task_queue}"'
        started = {execution.id async for execution in client.list_workflows(queue)}
        bobs = (f"hartflow:{BOB}:", f"{MEMORY_WORKFLOW_ID_PREFIX}{BOB}")  # his runs; his memory, which his edits start
        assert {i for i in started if not i.startswith(bobs)} == {alices_workflow}, "only bob's workflows"
        async with as_user(url, "alice") as api:
            assert await alices_views(api, alice.thread_id) == alice.views
            final = await api.post(f"/threads/{alice.thread_id}/runs/wait", json={"command": {"resume": "blue"}})
            assert final.status_code == 200 and f"{secret} all blue" in final.text, final.text
        assert (await client.get_workflow_handle(alices_workflow).describe()).status == (
            WorkflowExecutionStatus.COMPLETED
        )
