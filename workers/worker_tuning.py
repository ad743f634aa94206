"""``temporal.worker``: how much work one worker process takes on at once, and how many pollers ask for it.

Every key left unset is the SDK's default, and all are unset by default: on a 2-core machine running the worker
beside the dev server no variant measured better than the SDK's defaults, and fewer workflow-task slots (2) measured
clearly worse (README, Benchmarks: ``python -m bench --only throughput --worker-tuning ...``). Set them per
deployment for other shapes (more cores, a remote server).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WorkerTuning(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrent_workflow_tasks: int | None = Field(None, ge=1, description="workflow tasks in progress at once")
    max_concurrent_activities: int | None = Field(None, ge=1, description="activities in progress at once")
    max_concurrent_local_activities: int | None = Field(None, ge=1, description="local activities at once")
    workflow_task_pollers: int | None = Field(None, ge=1, description="concurrent polls for workflow tasks")
    activity_task_pollers: int | None = Field(None, ge=1, description="concurrent polls for activity tasks")
    nonsticky_to_sticky_poll_ratio: float | None = Field(
        None, gt=0, description="workflow-task polls of the shared queue per poll of this worker's sticky queue"
    )

    def worker_options(self) -> dict[str, Any]:
        """The ``temporalio.worker.Worker`` keyword arguments for the keys that are set."""
        names = {"workflow_task_pollers": "max_concurrent_workflow_task_polls"}
        names["activity_task_pollers"] = "max_concurrent_activity_task_polls"
        return {names.get(key, key): value for key, value in self.model_dump().items() if value is not None}
