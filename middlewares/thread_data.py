"""ThreadData: where the thread's files are, and which run the user's message started.

Hook
* ``before_agent``: validates the user and thread ids and writes ``thread_data`` =
  ``{workspace_path, uploads_path, outputs_path}``. The paths are relative to the storage home: the workflow
  never knows a worker's home, and workers on different hosts may mount it in different places. Lazy by
  default (DeerFlow's ``lazy_init=True``): no I/O, the sandbox creates the folders on first use. With
  ``lazy_init: false`` the ``thread.ensure_dirs`` activity creates them now.
  It also stamps the last HumanMessage (same id, so it is replaced in place) with ``name="user-input"``
  (unless it has a name) and ``additional_kwargs`` ``run_id`` and ``timestamp`` (the run's clock, ISO-8601
  UTC): DeerFlow finds run boundaries by these markers.

Writes: thread state (``thread_data``, the stamped message) and, when eager, the folders (side effect).

Parts: the contract ``vocabulary/contracts/thread.py`` (``THREAD_ENSURE_DIRS``) and its activity
``activities/thread_data.py``; the folder layout ``vocabulary/paths.py`` (``user_data_dirs``). Tests:
``tests/test_thread_data.py``.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage
from pydantic import BaseModel, ConfigDict

from middlewares._activity_call import call_activity
from middlewares.base import Middleware
from middlewares.context import ActivityOptions, RunContext
from vocabulary.contracts import THREAD_ENSURE_DIRS, ThreadDirsInput
from vocabulary.paths import user_data_dirs
from vocabulary.state import StateUpdate, ThreadState

USER_INPUT_NAME = "user-input"


class ThreadDataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lazy_init: bool = True
    """False: create the thread's folders at the start of every run instead of on first sandbox use."""


class ThreadDataMiddleware(Middleware):
    def __init__(self, config: ThreadDataConfig | None = None) -> None:
        self.config = config or ThreadDataConfig()

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        paths = user_data_dirs(ctx.user_id, ctx.thread_id)  # raises on ids that are no safe path segment
        if not self.config.lazy_init:
            await call_activity(
                ctx,
                THREAD_ENSURE_DIRS,
                ThreadDirsInput(ctx.thread),
                summary="ThreadData.before_agent · create thread folders",
                options=ActivityOptions(local=True),
            )
        update: StateUpdate = {"thread_data": paths}
        last = state.messages[-1] if state.messages else None
        if isinstance(last, HumanMessage):
            stamps = {"run_id": ctx.run_id, "timestamp": ctx.now().isoformat()}
            update["messages"] = [
                last.model_copy(
                    update={
                        "name": last.name or USER_INPUT_NAME,
                        "additional_kwargs": {**last.additional_kwargs, **stamps},
                    }
                )
            ]
        return update
