"""What every route needs: the config, the Temporal client, storage, and the caller's validated thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from temporalio.client import Client

from activities.paths import InvalidIdError, validate_thread_id, validate_user_id
from activities.storage import ObjectStore
from activities.thread_store import ObjectThreadStore
from vocabulary.contracts import ThreadRef
from workers.api.auth import current_user
from workers.api.ledger import Ledger
from workers.config import HartflowConfig, open_object_store


@dataclass
class ApiContext:
    config: HartflowConfig
    client: Client
    objects: ObjectStore = field(init=False)
    store: ObjectThreadStore = field(init=False)
    ledger: Ledger = field(init=False)
    """Every storage call of the thread and run routes, and the runs' status (``ledger.py``)."""

    def __post_init__(self) -> None:
        self.objects = open_object_store(self.config)
        self.store = ObjectThreadStore(self.objects, self.config.storage.kept_versions)
        self.ledger = Ledger(self.client, self.objects, self.store)


def api(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.hartflow
    return context


def thread_ref(user_id: str, thread_id: str) -> ThreadRef:
    """The caller's thread, its id checked as the CLI checks it (422 otherwise: nothing is read or written)."""
    try:
        return ThreadRef(validate_user_id(user_id), validate_thread_id(thread_id))
    except InvalidIdError as exc:
        raise HTTPException(422, str(exc)) from None


def path_thread(thread_id: str, user: str = Depends(current_user)) -> ThreadRef:
    """FastAPI dependency: the ``{thread_id}`` of the path as the caller's thread."""
    return thread_ref(user, thread_id)


Context = Annotated[ApiContext, Depends(api)]
Thread = Annotated[ThreadRef, Depends(path_thread)]
User = Annotated[str, Depends(current_user)]
