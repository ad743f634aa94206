"""The one-shot workflow: one system + user prompt to a model, its answer's text back (DeerFlow's
``run_oneshot_llm``, ``bytedance/deer-flow: backend/packages/harness/deerflow/utils/oneshot_llm.py``).

The Agent Server's small model-backed routes (``POST /api/input-polish``, ``POST /api/threads/{id}/suggestions``:
``workers/api/oneshot.py``) start one per request and wait for its result, so the model is called by the
``model.invoke`` activity on a worker, where the provider keys are: an API server never holds them. The id is the
caller's (``vocabulary/workflow_ids.py``, ``oneshot_workflow_id``); the caller bounds the whole workflow with its
execution timeout. A model error fails the workflow with the activity's error (scrubbed of secrets there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from langchain_core.messages import HumanMessage, SystemMessage
from temporalio import workflow
from temporalio.common import RetryPolicy

from vocabulary.contracts import MODEL_INVOKE, LlmRetryBudget, ModelCallInput, ModelPurpose
from vocabulary.messages import message_text

ONESHOT_WORKFLOW = "HartflowOneShot"


@dataclass
class OneShotInput:
    model: str
    """The model spec or ``models`` name, as a run records it (``workers/models.py``, ``select_model``)."""
    purpose: ModelPurpose
    system: str
    prompt: str
    retry: LlmRetryBudget = field(default_factory=LlmRetryBudget)
    timeout_seconds: float = 120.0
    """One attempt's start-to-close timeout (the deployment's ``run.model_call.timeout_seconds``)."""
    heartbeat_seconds: float = 30.0


@workflow.defn(name=ONESHOT_WORKFLOW)
class OneShotWorkflow:
    @workflow.run
    async def run(self, input: OneShotInput) -> str:
        retry = input.retry
        reply = await workflow.execute_activity(
            MODEL_INVOKE,
            ModelCallInput(
                model=input.model,
                messages=[HumanMessage(input.prompt)],
                system_message=SystemMessage(input.system),
                purpose=input.purpose,
                run_key=workflow.info().workflow_id,
                retry=retry,
            ),
            result_type=MODEL_INVOKE.output,
            summary=f"One-shot · {input.purpose}",
            start_to_close_timeout=timedelta(seconds=input.timeout_seconds),
            heartbeat_timeout=timedelta(seconds=input.heartbeat_seconds),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=retry.base_delay_ms),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(milliseconds=max(retry.base_delay_ms, retry.cap_delay_ms)),
                maximum_attempts=retry.max_attempts,
            ),
        )
        return message_text(reply)
