"""Tool approvals: the request a paused run asks and the decisions that answer it, in LangChain's
human-in-the-loop shape (``langchain/agents/middleware/human_in_the_loop.py``: ``HITLRequest`` with
``action_requests`` / ``review_configs``, decisions ``approve`` / ``edit`` / ``reject``), which ``langgraph-sdk``
clients and agent inboxes already speak.

A request asks every gated call of one model answer at once. Its record (``approval_request``) is what the run's
``pending_input`` shows and what the thread's ``approvals`` channel keeps, decided or not: the audit of who decided
what, when, and the edited args. Its ``status``: ``pending``, ``decided``, or ``abandoned`` (the run ended
before a decision: cancelled or failed). A decision answers one call; a review answers the calls it names (all of them,
in request order, when it names none): the run resumes once every call has its decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vocabulary.human_input import InvalidReplyError, ReplyConflictError

KIND = "approval_request"
DECISIONS = ("approve", "edit", "reject")
ON_TIMEOUT = ("approve", "reject")


@dataclass
class ReviewInput:
    """The ``review`` update: ``decisions`` for the calls ``call_ids`` names (every pending call when empty)."""

    decisions: list[dict[str, Any]] = field(default_factory=list)
    request_id: str | None = None
    call_ids: list[str] = field(default_factory=list)
    reviewer: str | None = None
    """Who decides (the API's user, the CLI's configured user): recorded in the audit."""


def is_approval(request: dict[str, Any] | None) -> bool:
    return isinstance(request, dict) and request.get("kind") == KIND


def interrupt_value(request: dict[str, Any]) -> dict[str, Any]:
    """LangChain's ``HITLRequest``: what an Agent Server interrupt carries for a pending approval."""
    return {"action_requests": request["action_requests"], "review_configs": request["review_configs"]}


def parse_review(raw: Any, *, reviewer: str | None = None) -> ReviewInput:
    """A review from a signal or a ``command.resume``: ``{"decisions": [...]}`` plus optional ``request_id``,
    ``call_ids`` and ``reviewer``."""
    if isinstance(raw, ReviewInput):
        return raw
    if not isinstance(raw, dict):
        raise InvalidReplyError(f"a review is an object with 'decisions', not {type(raw).__name__}")
    unknown = set(raw) - {"decisions", "request_id", "call_ids", "reviewer"}
    if unknown:
        raise InvalidReplyError(f"unknown review key(s): {', '.join(sorted(unknown))}")
    decisions, call_ids = raw.get("decisions"), raw.get("call_ids") or []
    if not isinstance(decisions, list) or not all(isinstance(d, dict) for d in decisions):
        raise InvalidReplyError("'decisions' must be a list of objects")
    if not isinstance(call_ids, list) or not all(isinstance(c, str) for c in call_ids):
        raise InvalidReplyError("'call_ids' must be a list of tool call ids")
    for key in ("request_id", "reviewer"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise InvalidReplyError(f"review key {key!r} must be a string")
    return ReviewInput(list(decisions), raw.get("request_id"), list(call_ids), raw.get("reviewer") or reviewer)


def validate_review(
    request: dict[str, Any] | None,
    decided: dict[str, dict[str, Any]],
    review: ReviewInput,
    schemas: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The review's decisions by call id, checked against the pending ``request`` (``decided``: the calls
    answered already; ``schemas``: each tool's JSON schema, for edited args). Raises :class:`InvalidReplyError`
    (:class:`ReplyConflictError` for a request that is not the pending one, or a call answered already)."""
    if not is_approval(request):
        raise ReplyConflictError("this run is not waiting for an approval")
    assert request is not None
    if review.request_id is not None and review.request_id != request.get("request_id"):
        raise ReplyConflictError(
            f"stale request_id {review.request_id!r}: the pending request is {request.get('request_id')!r}"
        )
    ids: list[str] = request["tool_call_ids"]
    named = review.call_ids or [i for i in ids if i not in decided]
    if len(set(named)) != len(named):
        raise InvalidReplyError("a call is named twice")
    if len(review.decisions) != len(named):
        raise InvalidReplyError(f"{len(review.decisions)} decision(s) for {len(named)} call(s) waiting: {named}")
    checked: dict[str, dict[str, Any]] = {}
    for call_id, decision in zip(named, review.decisions, strict=True):
        if call_id not in ids:
            raise InvalidReplyError(f"unknown call {call_id!r}; waiting: {', '.join(ids)}")
        if call_id in decided:
            raise ReplyConflictError(f"call {call_id!r} was decided already")
        index = ids.index(call_id)
        action, config = request["action_requests"][index], request["review_configs"][index]
        checked[call_id] = _decision(action, config["allowed_decisions"], decision, schemas.get(action["name"]))
    return checked


def _decision(
    action: dict[str, Any], allowed: list[str], decision: dict[str, Any], schema: dict[str, Any] | None
) -> dict[str, Any]:
    kind = decision.get("type")
    if kind not in DECISIONS:
        raise InvalidReplyError(f"unknown decision {kind!r}; decisions are {', '.join(DECISIONS)}")
    if kind not in allowed:
        raise InvalidReplyError(f"{action['name']}: {kind!r} is not allowed (allowed: {', '.join(allowed)})")
    if kind == "approve":
        return {"type": "approve"}
    if kind == "reject":
        message = decision.get("message")
        if message is not None and not isinstance(message, str):
            raise InvalidReplyError("a reject's 'message' must be text")
        return {"type": "reject", "message": message} if message else {"type": "reject"}
    edited = decision.get("edited_action")
    if not isinstance(edited, dict) or not isinstance(edited.get("args"), dict):
        raise InvalidReplyError("an edit needs 'edited_action': {'name': ..., 'args': {...}}")
    if edited.get("name", action["name"]) != action["name"]:
        raise InvalidReplyError(f"an edit changes the arguments of {action['name']!r}, not which tool runs")
    problem = args_problem(schema or {}, edited["args"])
    if problem is not None:
        raise InvalidReplyError(f"{action['name']}: edited args: {problem}")
    return {"type": "edit", "edited_action": {"name": action["name"], "args": dict(edited["args"])}}


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def args_problem(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """Why ``args`` do not fit a tool's advertised JSON schema (``vocabulary/tool_args.py`` builds the built-in
    ones; MCP servers send theirs): a missing required argument, or a value of the wrong type or outside its
    ``enum``, at the top level. ``None`` when they fit."""
    properties: dict[str, Any] = schema.get("properties") or {}
    missing = [name for name in schema.get("required") or [] if name not in args and name != "description"]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    for name, value in args.items():
        spec = properties.get(name)
        if not isinstance(spec, dict):
            continue
        types = spec.get("type")
        names = [types] if isinstance(types, str) else list(types or [])
        accepted = tuple(t for n in names for t in _JSON_TYPES.get(n, ()))
        wrong_bool = isinstance(value, bool) and "boolean" not in names
        if names and (not isinstance(value, accepted) or wrong_bool):
            return f"{name!r} must be {' or '.join(names)}, got {type(value).__name__}"
        if "enum" in spec and value not in spec["enum"]:
            return f"{name!r} must be one of {spec['enum']}"
    return None


def timeout_decision(on_timeout: str, name: str, deadline: str) -> dict[str, Any]:
    if on_timeout == "approve":
        return {"type": "approve"}
    return {"type": "reject", "message": f"No reviewer decided on `{name}` by {deadline}; the call did not run."}


def rejection_text(name: str, call_id: str, decision: dict[str, Any]) -> str:
    """What the model reads for a rejected call: the reviewer's reason, else LangChain's default text."""
    return str(decision.get("message") or f"User rejected the tool call for `{name}` with id {call_id}")


def approval_markdown(request: dict[str, Any]) -> list[str]:
    """The run's current details in the Web UI while it waits: which calls, for whom, until when."""
    lines = [f"**Waiting for approval** (user {request.get('user_id')}) until {request.get('deadline')}:"]
    for call_id, action in zip(request["tool_call_ids"], request["action_requests"], strict=True):
        lines.append(f"- `{call_id}` {action['name']} · {args_summary(action['args'])}")
    if request.get("subagent_workflow_id"):
        lines.append(f"asked by the subagent `{request['subagent_workflow_id']}`")
    lines.append(f"`request_id`: `{request.get('request_id')}`")
    return lines


def args_summary(args: Any, limit: int = 80) -> str:
    text = " ".join(f"{k}={v!r}" for k, v in args.items() if k != "description") if isinstance(args, dict) else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


CARD_SOURCE = "tool_approval"
_CARD_OPTIONS = {"approve": "Approve", "reject": "Reject"}


def approval_card(request: dict[str, Any]) -> dict[str, Any] | None:
    """The pending request as DeerFlow's Human Input Card reads it (a ``human_input_request``: ``bytedance/
    deer-flow: frontend/src/core/messages/human-input.ts``, ``parseHumanInputRequest``): one option per decision
    every call allows among approve and reject (edit needs the arguments, which the card cannot take), and, when
    reject is one, free text as the rejection's reason (``choice_with_other``). ``None`` when no option fits."""
    allowed = [set(config["allowed_decisions"]) for config in request["review_configs"]]
    kinds = [kind for kind in _CARD_OPTIONS if all(kind in decisions for decisions in allowed)]
    if not kinds:
        return None
    calls = [f"{action['name']} · {args_summary(action['args'])}" for action in request["action_requests"]]
    return {
        "version": 1,
        "kind": "human_input_request",
        "source": CARD_SOURCE,
        "request_id": request["request_id"],
        "title": "Tool approval",
        "question": f"Run {'this tool call' if len(calls) == 1 else f'these {len(calls)} tool calls'}? "
        + "; ".join(calls),
        "context": "\n\n".join(action["description"] for action in request["action_requests"]),
        "input_mode": "choice_with_other" if "reject" in kinds else "single_choice",
        "options": [{"id": kind, "label": _CARD_OPTIONS[kind], "value": kind} for kind in kinds],
    }


def card_review(request: dict[str, Any], response: dict[str, Any]) -> ReviewInput:
    """The review a Human Input Card's answer (its ``human_input_response``) gives ``request``: the chosen option
    for every call, or a typed text as every call's rejection with that reason."""
    kind, value = response.get("response_kind"), response.get("value")
    if kind == "option":
        chosen = response.get("option_id") or value
        if chosen not in _CARD_OPTIONS:
            raise InvalidReplyError(f"unknown option {chosen!r}; the card offers {', '.join(_CARD_OPTIONS)}")
        decision: dict[str, Any] = {"type": chosen}
    elif kind == "text" and isinstance(value, str) and value.strip():
        decision = {"type": "reject", "message": value.strip()}
    else:
        raise InvalidReplyError("a card's answer is an option (approve, reject) or a reason to reject")
    request_id = response.get("request_id")
    ids: list[str] = request["tool_call_ids"]
    return ReviewInput([dict(decision) for _ in ids], request_id if isinstance(request_id, str) else None, list(ids))
