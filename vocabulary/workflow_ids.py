"""The Temporal workflow ids hartflow uses, and why no user can name another user's workflow or a system one.

Temporal keeps one open workflow per id in a namespace, and the external payload store keys every payload by its
workflow id (``activities/storage/payloads.py``). So an id is an identity: whoever can make a string appear as an
id can block, signal or (through deleting "his" payloads) destroy the workflow that holds it.

=====================================  =============================================================
``hartflow:{user_id}:{thread_id}``     a thread's runs (one open at a time: "one run per thread")
``…-task-{tool_call_id}``              a run's subagents (``workflows/delegation.child_workflow_id``)
``….queue``                            the thread's queued messages (``workflows/thread_queue.py``)
``hartflow:{user_id}:{purpose}.{hex}``  one model prompt of a small API route (``workflows/oneshot.py``)
``hartflow:{user_id}:schedule.{uuid}``  a user's schedule, and its fires (``…-{time}``, ``workflows/schedule_fire.py``)
``hartflow-memory-{user_id}``          a user's memory queue (``workflows/memory.py``)
``hartflow-breaker-{provider}-{model}``  the model's circuit breaker (``vocabulary/breaker.py``)
``hartflow-sandbox-sweep-{hex}``       a sandbox sweep (``hartflow sandboxes sweep``)
=====================================  =============================================================

User and thread ids are ``[A-Za-z0-9_-]`` (``vocabulary/paths.py``), so the ``:`` separators make a run's id
name exactly one (user, thread) pair, and no id a user can cause (they all start with ``hartflow:``) can equal a
memory or system id (they start with ``hartflow-``). A one-shot id is its user's too, and its ``.`` (in no thread
id) keeps it apart from every thread's runs and subagents; so does a schedule's (a Temporal Schedule id, and the
prefix of the workflow ids of its fires).

Runs started before ids were per user have the **legacy** id ``hartflow-{thread_id}``, one namespace for every
user. No new workflow is ever started under it; such a run is still found (``workers/client/threads.py``), but
only by the user its ``HartflowUserId`` search attribute names, and finishes and replays as it started.
"""

from __future__ import annotations

import re

from vocabulary.paths import validate_thread_id, validate_user_id

RUN_PREFIX = "hartflow:"
LEGACY_RUN_PREFIX = "hartflow-"


def run_workflow_id(user_id: str, thread_id: str) -> str:
    """The id of every run of ``user_id``'s thread ``thread_id``; both ids are validated first."""
    return f"{RUN_PREFIX}{validate_user_id(user_id)}:{validate_thread_id(thread_id)}"


def legacy_run_workflow_id(thread_id: str) -> str:
    """The id runs had before ids were per user: found and finished, never started anew."""
    return f"{LEGACY_RUN_PREFIX}{validate_thread_id(thread_id)}"


def oneshot_workflow_id(user_id: str, purpose: str, nonce: str) -> str:
    """The id of one one-shot prompt of ``user_id`` (``purpose``: ``input_polish``, ``suggestions``; ``nonce``: hex,
    new per request)."""
    if not re.fullmatch(r"[a-z_]+", purpose) or not re.fullmatch(r"[0-9a-f]+", nonce):
        raise ValueError(f"a one-shot id takes a purpose [a-z_] and a hex nonce, not {purpose!r}, {nonce!r}")
    return f"{RUN_PREFIX}{validate_user_id(user_id)}:{purpose}.{nonce}"


SCHEDULE_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def schedule_id(user_id: str, cron_id: str) -> str:
    """The Temporal Schedule of ``user_id``'s schedule ``cron_id`` (a lowercase UUID, as clients name it)."""
    if not SCHEDULE_UUID.fullmatch(cron_id):
        raise ValueError(f"a schedule id is a UUID, not {cron_id[:80]!r}")
    return f"{RUN_PREFIX}{validate_user_id(user_id)}:schedule.{cron_id}"


def schedule_prefix(user_id: str) -> str:
    """What every schedule id of ``user_id`` starts with."""
    return f"{RUN_PREFIX}{validate_user_id(user_id)}:schedule."


def queue_workflow_id(run_workflow_id: str) -> str:
    """The id of the queue of a thread whose runs have the id ``run_workflow_id`` (its ``.`` is in no thread id)."""
    return f"{run_workflow_id}.queue"
