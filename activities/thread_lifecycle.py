"""A deployment's threads on storage: listing them, and deleting everything one thread owns.

What a thread owns, on either backend (:func:`thread_prefixes` is the one place that says so):

* ``users/{u}/threads/{t}/`` — its state versions, uploads, outputs, workspace, message blobs;
* ``payloads/v0/ns/{ns}/wt/{type}/wi/{workflow id}/ri/{run id}/`` — the Temporal external-storage payloads of
  each of its runs (the layout of ``activities/storage/payloads.py``, which is the SDK S3 driver's: the workflow
  id is a whole key segment after ``wi``, so ``hartflow:u:a`` never matches ``hartflow:u:ab``).

Which runs' payloads go is the caller's decision (:func:`stored_runs` lists them, the caller asks Temporal
whose they are and whether they have closed, ``workers/client/threads.py``): the workflow id alone does not
say, since runs started before ids were per user share ``hartflow-{thread}`` across users, and a run that
starts while the thread is being deleted must keep its payloads.

With a remote backend a worker also keeps a working copy of the thread's files under its own home; deleting
on this host removes that copy too (other hosts' copies are caches that their next sync finds gone).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISDIR

from activities import no_follow
from activities.storage import ObjectStore
from activities.storage.payloads import encode_segment
from activities.thread_store import ObjectThreadStore
from vocabulary.contracts import ThreadRef
from vocabulary.paths import thread_dir, validate_thread_id

PAYLOADS_NAMESPACES = "payloads/v0/ns/"


@dataclass
class ThreadSummary:
    thread_id: str
    title: str | None
    messages: int
    version: int
    updated: str | None
    """When the newest state version was committed (ISO-8601); ``None`` for a thread with files but no state."""


@dataclass
class DeletedThread:
    thread_id: str
    prefixes: dict[str, int] = field(default_factory=dict)
    """Every key prefix examined and how many objects were removed under it."""
    local_dir: str | None = None
    """The thread's folder under this host's home, when one was left to remove."""

    @property
    def removed(self) -> int:
        return sum(self.prefixes.values())


def list_threads(objects: ObjectStore, user_id: str) -> list[ThreadSummary]:
    """Every thread of ``user_id`` that has anything in storage, by id."""
    store = ObjectThreadStore(objects)
    summaries = []
    for name in objects.list_children(f"users/{user_id}/threads/"):
        try:
            thread = ThreadRef(user_id, validate_thread_id(name))
        except ValueError:
            continue  # not a thread folder (a stray file or a foreign name)
        record = store.record(thread)
        state = (record or {}).get("state") or {}
        summaries.append(
            ThreadSummary(
                thread_id=name,
                title=state.get("title"),
                messages=len(state.get("messages") or []),
                version=int(record["version"]) if record else 0,
                updated=record.get("committed_at") if record else None,
            )
        )
    return summaries


@dataclass(frozen=True)
class StoredRun:
    """One run that has external payloads in storage: under ``prefix``, everything it stored."""

    workflow_id: str
    run_id: str
    prefix: str


def stored_runs(objects: ObjectStore, workflow_ids: list[str]) -> list[StoredRun]:
    """The runs of ``workflow_ids`` (in any namespace, of any workflow type) that have payloads in storage."""
    found = []
    for namespace in objects.list_children(PAYLOADS_NAMESPACES):
        types = f"{PAYLOADS_NAMESPACES}{namespace}/wt/"
        for workflow_type in objects.list_children(types):
            for workflow_id in workflow_ids:
                runs = f"{types}{workflow_type}/wi/{encode_segment(workflow_id)}/ri/"
                for run_id in objects.list_children(runs):
                    found.append(StoredRun(workflow_id, run_id, f"{runs}{run_id}/"))
    return found


def delete_thread(objects: ObjectStore, thread: ThreadRef, home: Path, runs: list[StoredRun]) -> DeletedThread:
    """Remove ``thread``'s folder and the payloads of ``runs``. The caller makes sure that no run of the thread
    is active and that ``runs`` are the thread's (:func:`stored_runs`)."""
    deleted = DeletedThread(thread.thread_id)
    for prefix in [f"{thread_dir(thread.user_id, thread.thread_id)}/", *(run.prefix for run in runs)]:
        deleted.prefixes[prefix] = objects.delete_prefix(prefix)
    # Filesystem backend: the folders left empty (a sandbox creates them up front). Remote backend: this host's
    # working copy.
    if _remove_local(home, thread_dir(thread.user_id, thread.thread_id)):
        deleted.local_dir = str(home / thread_dir(thread.user_id, thread.thread_id))
    return deleted


def _remove_local(home: Path, folder: str) -> bool:
    """Remove the thread's ``folder`` under ``home`` without following a symlink (``activities/no_follow.py``):
    a linked thread folder is unlinked, never emptied, and a linked folder above it means nothing of this
    thread is there."""
    parent, _, name = folder.rpartition("/")
    try:
        with no_follow.opened_dir(home, parent) as directory:
            found = os.stat(name, dir_fd=directory, follow_symlinks=False)
            if S_ISDIR(found.st_mode):
                shutil.rmtree(name, dir_fd=directory)  # fd-based: never descends through a link
            else:
                os.unlink(name, dir_fd=directory)
    except (FileNotFoundError, NotADirectoryError, no_follow.PathEscapeError):
        return False
    return True
