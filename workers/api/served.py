"""What LangGraph clients are served of a thread's messages and of a pending clarification: one shape for every
client, readable by those that know nothing of DeerFlow's flags.

The committed state is not changed (the model, replays of committed histories and the CLI read it as it is); the
routes and streams that serve ``values``, message tuples and interrupts pass them through here.

* **Internal messages are not served.** DeerFlow marks what the framework adds for the model with
  ``additional_kwargs.hide_from_ui`` (DynamicContext's date reminder and ``__memory`` block, ViewImage's image
  context, summaries, todo reminders) or with a control ``name``; DeerFlow's web app hides them
  (``isHiddenFromUIMessage`` in ``bytedance/deer-flow: frontend/src/core/messages/utils.ts``), but a generic
  LangGraph UI only hides ids prefixed ``do-not-render-`` and titles a thread by its first message. Left out of
  ``values``, they show nowhere and the thread's first message is the user's own (DynamicContext keeps it as
  ``X__user``, which DeerFlow's app matches to the ``X`` it sent).
* **The user's message shows as typed.** Uploads prepends its ``<current_uploads>`` envelope to the message the
  model reads and keeps the typed text in ``additional_kwargs.original_user_content``; that text is served as the
  content (DeerFlow's app strips the envelope itself: ``stripUploadedFilesTag``, same file).
* **A clarification reply shows as typed.** The reply is a hidden HumanMessage whose text is DeerFlow's protocol
  (``For your clarification "…", my answer is: …``, what the model reads) and whose
  ``additional_kwargs.human_input_response.value`` is what the user typed or chose
  (``vocabulary/human_input.py``). It is served, with that value as its content: DeerFlow's app still hides it
  and reads the response from ``additional_kwargs``; a generic UI shows the user's words.
* **A failed run says why, never with a secret.** The ``error`` frame (and ``runs.wait``'s ``__error__``) is
  :func:`error_frame`: the run's error ``type`` and ``message`` as its ``run_finished`` event recorded them
  (``workflows/run/view.py``: DeerFlow's fallback answer or the failure's root cause), with anything shaped like a
  key or token (``sk-…``, ``Bearer …``, ``api_key=…``) replaced by ``[redacted]``: provider errors may quote one.
* **A pending tool approval shows as a Human Input Card.** DeerFlow's app renders a card only for an
  ``ask_clarification`` ToolMessage carrying ``artifact.human_input`` (``isClarificationToolMessage`` in
  ``bytedance/deer-flow: frontend/src/core/messages/utils.ts``); while the state holds a pending approval, its
  card (``vocabulary/approvals.py``: ``approval_card``, options approve / reject) is served as such a message, last.
  It is not in the state: once decided, it is gone. The app's answer maps to decisions
  (``workers/api/approvals.py``).
* **An interrupt names its question.** A generic interrupt view (Agent Chat UI's ``GenericInterruptView``) shows
  the value's keys as a table, so the value is :func:`interrupt_value`: ``question``, ``options`` (the offered
  labels, ``[]`` for a free answer), ``fields`` (a form's field labels; forms only), ``context`` (when the
  question has one) and DeerFlow's whole ``human_input_request`` payload. A client answers with a message or with
  ``command.resume`` (``workers/api/replying.py``).
"""

from __future__ import annotations

import re
from typing import Any

from middlewares.uploads import ORIGINAL_USER_CONTENT_KEY
from vocabulary.approvals import approval_card, is_approval
from vocabulary.approvals import interrupt_value as approval_value

_SECRETS = re.compile(
    r"(?i)(?:\b(?:sk|rk|pk)-[A-Za-z0-9_-]{12,}|\bAIza[0-9A-Za-z_-]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}|\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|(?<=[\"'\s])(?:api[_-]?key|access[_-]?token|secret|password)[\"']?\s*[:=]\s*[\"']?[^\s\"',;}]{6,})"
)
HIDDEN_NAMES = frozenset({"summary", "loop_warning", "todo_reminder", "todo_completion_reminder"})
"""Control messages DeerFlow's app hides by ``name`` alone."""


def served_message(message: dict[str, Any]) -> dict[str, Any] | None:
    """The message as clients get it, or ``None`` when it is internal."""
    kwargs = message.get("additional_kwargs") or {}
    response = kwargs.get("human_input_response")
    if message.get("type") == "human" and isinstance(response, dict):
        typed = response.get("value")
        return {**message, "content": typed} if isinstance(typed, str) and typed.strip() else message
    if kwargs.get("hide_from_ui") is True:
        return None
    if message.get("type") == "human" and message.get("name") in HIDDEN_NAMES:
        return None
    original = kwargs.get(ORIGINAL_USER_CONTENT_KEY)
    if message.get("type") == "human" and isinstance(original, str) and original.strip():
        return {**message, "content": original}
    return message


def served_values(values: dict[str, Any] | None) -> dict[str, Any] | None:
    """``values`` with their messages as clients get them."""
    if not values or not isinstance(values.get("messages"), list):
        return values
    messages = [served for message in values["messages"] if (served := served_message(message)) is not None]
    pending = [record for record in values.get("approvals") or [] if record.get("status") == "pending"]
    card = approval_card(pending[-1]) if pending else None
    if card is not None:
        messages.append(
            {
                "type": "tool",
                "name": "ask_clarification",
                "id": f"{card['request_id']}:card",
                "tool_call_id": card["request_id"],
                "content": card["question"],
                "status": "success",
                "additional_kwargs": {},
                "artifact": {"human_input": card},
            }
        )
    return {**values, "messages": messages}


def interrupt_value(request: dict[str, Any]) -> dict[str, Any]:
    """What an interrupt carries for the pending ``human_input_request`` (the shape the module docstring names), or
    for a pending tool approval LangChain's ``{action_requests, review_configs}`` (``vocabulary/approvals.py``)."""
    if is_approval(request):
        return approval_value(request)
    value: dict[str, Any] = {"question": str(request.get("question") or "")}
    if request.get("context"):
        value["context"] = str(request["context"])
    value["options"] = [str(option.get("label", "")) for option in request.get("options") or []]
    if request.get("fields"):
        value["fields"] = [str(spec.get("label") or spec.get("name", "")) for spec in request["fields"]]
    value["human_input_request"] = request
    return value


def redacted(text: str) -> str:
    """``text`` with anything shaped like an API key or a token replaced by ``[redacted]``."""
    return _SECRETS.sub("[redacted]", text)


def error_frame(run_id: str, error: Any) -> dict[str, str]:
    """The ``error`` frame of a failed run: LangGraph's ``error`` and ``message``, from the run's recorded error
    (``{"type", "message"}``; a run recorded before errors were has none: then the run id alone)."""
    if not isinstance(error, dict) or not error.get("message"):
        return {"error": "RunFailed", "message": f"run {run_id} failed"}
    return {"error": redacted(str(error.get("type") or "RunFailed")), "message": redacted(str(error["message"]))}
