"""One prompt to the deployment's model from an API route, answered by a worker: the one-shot workflow
(``workflows/oneshot.py``) started on the workers' task queue and waited for.

The API server builds no model and holds no provider key: the ``model.invoke`` activity runs on a worker. The
workflow's id is the caller's (``hartflow:{user}:{purpose}.{hex}``), and its execution timeout is
``api.oneshot_timeout_seconds``. What a caller gets when there is no answer:

* no answer in time (no worker on the task queue, a provider that hangs): **504**, naming the timeout and queue
  (an attempt that timed out on its own, ``run.model_call``'s timeouts, is a 504 too);
* the model failed (after the deployment's LLM retries): **502** with the activity's reason, which the activity
  has already scrubbed of any resolved secret (``activities/model.py``);
* Temporal unreachable: 503 (the app's handler, ``workers/api/app.py``).
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

from fastapi import HTTPException
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import TimeoutError as TemporalTimeout

from vocabulary.causes import root_cause, root_message
from vocabulary.contracts import ModelPurpose
from vocabulary.text import one_line
from vocabulary.workflow_ids import oneshot_workflow_id
from workers.api.deps import ApiContext
from workflows.oneshot import OneShotInput, OneShotWorkflow

REASON_CHARS = 500
"""The model's error as a 502 shows it: one line, at most this long."""


async def ask_model(
    context: ApiContext, user: str, *, model: str, purpose: ModelPurpose, system: str, prompt: str
) -> str:
    """The text the worker's model answers ``system`` + ``prompt`` with; 504 or 502 as above."""
    config = context.config
    policy = config.run.model_call_policy()
    timeout = config.api.oneshot_timeout_seconds
    try:
        return await context.client.execute_workflow(
            OneShotWorkflow.run,
            OneShotInput(
                model=model,
                purpose=purpose,
                system=system,
                prompt=prompt,
                retry=policy.retry_budget,
                timeout_seconds=config.run.model_call.timeout_seconds,
                heartbeat_seconds=config.run.model_call.heartbeat_seconds,
            ),
            id=oneshot_workflow_id(user, purpose, uuid.uuid4().hex),
            task_queue=config.temporal.task_queue,
            execution_timeout=timedelta(seconds=timeout),
            static_summary=f"{purpose} for {user}",
        )
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, TemporalTimeout):
            raise HTTPException(
                504,
                f"the model did not answer within {timeout:g}s (api.oneshot_timeout_seconds): is a worker serving "
                f"task queue {config.temporal.task_queue!r}?",
            ) from None
        reason = one_line(root_message(exc), REASON_CHARS)
        if isinstance(root_cause(exc), TemporalTimeout):
            raise HTTPException(504, f"the model call timed out ({reason})") from None
        raise HTTPException(502, f"the model failed: {reason}") from None


_THINK_BLOCK = re.compile(r"<think\b[^>]*>.*?</think\s*>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think\b[^>]*>", re.IGNORECASE)


def clean_answer(text: str, *, cut_at_unclosed_think: bool) -> str:
    """The answer without reasoning ``<think>`` blocks and without one wrapping markdown code fence (DeerFlow's
    ``strip_think_blocks`` then ``strip_markdown_code_fence``, ``bytedance/deer-flow:
    backend/packages/harness/deerflow/utils/llm_text.py``). A dangling ``<think>`` is a model cut off
    mid-thought: with ``cut_at_unclosed_think`` the text ends there (for JSON answers); without, it stays (a
    polished draft may mention the tag)."""
    text = _THINK_BLOCK.sub("", text)
    if cut_at_unclosed_think and (opened := _THINK_OPEN.search(text)) is not None:
        text = text[: opened.start()]
    text = text.strip()
    lines = text.splitlines()
    if text.startswith("```") and len(lines) >= 3 and lines[-1].startswith("```"):
        text = "\n".join(lines[1:-1]).strip()
    return text
