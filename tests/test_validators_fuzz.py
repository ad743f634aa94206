"""Property-based fuzzing of what validates input from outside: the clarification reply (the ``reply`` update's
validator and the ``clarification_reply`` signal's parser) and the reducers that fold updates into thread state.

The reply properties: anything JSON can carry is either refused with :class:`InvalidReplyError` (which the
workflow turns into a rejected update or a dropped signal) or accepted — never another exception, which would
fail the workflow task — and an accepted reply really answers the pending request, so the hidden
``human_input_response`` message can always be built from it. Pending requests come from the real request
builder (``middlewares/clarification.py``) fed with arbitrary ``ask_clarification`` arguments.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from middlewares.clarification import build_request, normalize_fields
from vocabulary.human_input import (
    FIELD_TYPES,
    InvalidReplyError,
    Reply,
    form_values,
    parse_reply,
    request_markdown,
    response_message,
    validate_reply,
)
from vocabulary.state import SandboxConflictError, merge_goal, merge_sandbox, merge_todos, merge_viewed_images

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies ---------------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "  ", "yes", "no", "true", "3", "2.5", "2026-01-31", "not-a-date", "a,b", "red"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

FIELD_NAMES = ["env", "size", "when", "notify", "notes", "tags", "count"]
LABELS = ["red", "blue", "Green", " padded ", "a,b", "option-1", "", "red"]


@st.composite
def raw_fields(draw: st.DrawFn) -> Any:
    """What a model may put in ``ask_clarification``'s ``fields``: often sound, sometimes not at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    fields = []
    for name in draw(st.lists(st.sampled_from(FIELD_NAMES), max_size=4, unique=True)):
        field: dict[str, Any] = {"name": name}
        if draw(st.booleans()):
            field["type"] = draw(st.sampled_from([*sorted(FIELD_TYPES), "colour", ""]))
        if draw(st.booleans()):
            field["required"] = draw(st.sampled_from([True, False, "true", 1, 0, "no"]))
        if draw(st.booleans()):
            field["options"] = draw(st.lists(st.sampled_from(LABELS), max_size=4))
        if draw(st.booleans()):
            field["label"] = draw(st.sampled_from(["Environment", "", "Size"]))
        fields.append(field)
    return fields


@st.composite
def pending_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A pending ``human_input_request`` as the Clarification middleware builds it: form, choice or free text."""
    args: dict[str, Any] = {"question": draw(st.text(max_size=20))}
    if draw(st.booleans()):
        args["options"] = draw(st.lists(st.sampled_from(LABELS), max_size=4) | json_values)
    if draw(st.booleans()):
        args["context"] = draw(st.text(max_size=10))
    fields = normalize_fields(draw(raw_fields())) if draw(st.booleans()) else []
    call_id = draw(st.sampled_from(["ask1", "ask2", ""]))
    return build_request(args, fields, request_id=f"clarification:{call_id or 'h'}", tool_call_id=call_id)


def _offered_values(request: dict[str, Any]) -> list[Any]:
    """Values that answer some field or option of ``request`` (so accepted replies are actually generated)."""
    values: list[Any] = []
    for option in request.get("options") or []:
        values += [option["id"], option["value"]]
    for spec in request.get("fields") or []:
        for option in spec.get("options") or []:
            values += [option["id"], option["label"], option["value"]]
    return values


def _field_values(spec: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values a person would give ``spec``'s field, in the shapes a command line or a signal dialog produces."""
    options = spec.get("options") or []
    picks = st.sampled_from([o[key] for o in options for key in ("id", "label", "value")] or ["x"])
    kind = spec["type"]
    if kind == "select":
        return picks
    if kind == "multi_select":
        return st.lists(picks, min_size=1, max_size=3) | picks
    if kind == "number":
        return st.integers(-5, 5) | st.sampled_from(["3", "2.5", " 7 "])
    if kind == "checkbox":
        return st.booleans() | st.sampled_from(["yes", "no", "on", "0"])
    if kind == "date":
        return st.sampled_from(["2026-01-31", "2026-02-30"])
    return st.text(min_size=1, max_size=8)


@st.composite
def sound_replies_for(draw: st.DrawFn, request: dict[str, Any]) -> dict[str, Any]:
    """A reply shaped like a real answer to ``request`` (most are accepted; some values are still off)."""
    payload: dict[str, Any] = {}
    if request.get("fields"):
        payload["fields"] = {
            spec["name"]: draw(_field_values(spec))
            for spec in request["fields"]
            if spec["required"] or draw(st.booleans())
        }
    elif request.get("options") and draw(st.booleans()):
        payload["option_id"] = draw(st.sampled_from([option["id"] for option in request["options"]]))
    if "option_id" not in payload and (not request.get("fields") or draw(st.booleans())):
        payload["answer"] = draw(st.text(min_size=1, max_size=8))
    if draw(st.booleans()):
        payload["request_id"] = request["request_id"]
    return payload


@st.composite
def replies_for(draw: st.DrawFn, request: dict[str, Any]) -> Any:
    """A signal payload for ``request``: arbitrary JSON, an object of plausible parts, or a sound answer."""
    shape = draw(st.integers(0, 4))
    if shape == 0:
        return draw(json_values)
    if shape >= 3:
        return draw(sound_replies_for(request))
    plausible = st.sampled_from(_offered_values(request) or ["x"]) | scalars
    names = [spec["name"] for spec in request.get("fields") or []] + ["colour"]
    payload: dict[str, Any] = {}
    if draw(st.booleans()):
        payload["answer"] = draw(st.text(max_size=10) | json_values)
    if draw(st.booleans()):
        ids = [option["id"] for option in request.get("options") or []] + ["option-9"]
        payload["option_id"] = draw(st.sampled_from(ids) | json_values)
    if draw(st.booleans()):
        payload["fields"] = draw(
            st.dictionaries(st.sampled_from(names), plausible | st.lists(plausible, max_size=3), max_size=len(names))
            | json_values
        )
    if draw(st.booleans()):
        payload["request_id"] = draw(st.sampled_from([request["request_id"], "clarification:stale"]) | json_values)
    if draw(st.integers(0, 9)) == 0:
        payload[draw(st.text(max_size=6))] = draw(json_values)
    return payload


# -- the reply validators ------------------------------------------------------------------------------------


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


@FUZZ
@given(payload=json_values)
def test_parse_reply_refuses_with_invalid_reply_error_or_returns_a_well_typed_reply(payload: Any) -> None:
    try:
        reply = parse_reply(payload)
    except InvalidReplyError:
        return
    for value in (reply.answer, reply.option_id, reply.request_id):
        assert value is None or isinstance(value, str)
    assert isinstance(reply.fields, dict)


@FUZZ
@given(request=pending_requests(), data=st.data())
def test_an_accepted_reply_answers_the_request_and_anything_else_is_an_invalid_reply_error(
    request: dict[str, Any], data: st.DataObject
) -> None:
    request_markdown(request)  # the current details of the paused run: must never fail either
    payload = data.draw(replies_for(request))
    try:
        reply = parse_reply(payload)
        validate_reply(request, reply)
    except InvalidReplyError as exc:
        assert str(exc), "a refusal always says why"
        return

    assert reply.request_id in (None, request["request_id"])
    required = [spec["name"] for spec in request.get("fields") or [] if spec["required"]]
    if reply.option_id is not None:
        assert reply.option_id in [option["id"] for option in request.get("options") or []]
        assert not reply.fields and _blank(reply.answer)
    elif reply.fields:
        answered = form_values(request, reply.fields)
        assert set(required) <= set(answered), "every required field is answered"
        assert answered or not _blank(reply.answer)
        for spec in request.get("fields") or []:
            offered = [option["value"] for option in spec.get("options") or []]
            value = answered.get(spec["name"])
            if value is not None and spec["type"] == "select":
                assert value in offered
            if value is not None and spec["type"] == "multi_select":
                assert value and set(value) <= set(offered)
    else:
        assert not required and not _blank(reply.answer)

    message = response_message(request, reply, message_id="m1")
    response = message.additional_kwargs["human_input_response"]
    assert response["request_id"] == request["request_id"]
    assert isinstance(response["value"], str) and response["value"].strip()
    assert message.content == f'For your clarification "{request["question"]}", my answer is: {response["value"]}'


@FUZZ
@given(payload=json_values)
def test_no_reply_is_accepted_when_nothing_is_pending(payload: Any) -> None:
    try:
        validate_reply(None, parse_reply(payload))
    except InvalidReplyError:
        return
    raise AssertionError("accepted a reply while nothing was pending")


@FUZZ
@given(request=pending_requests(), option_id=st.text(max_size=12))
def test_an_option_id_is_accepted_exactly_when_it_was_offered(request: dict[str, Any], option_id: str) -> None:
    offered = {option["id"] for option in request.get("options") or []}
    for candidate in (option_id, *sorted(offered)):
        try:
            validate_reply(request, Reply(option_id=candidate))
        except InvalidReplyError as exc:
            assert candidate not in offered
            assert f"unknown option {candidate!r}" in str(exc)
        else:
            assert candidate in offered


# -- reducers not covered by test_state.py / test_messages.py ---------------------------------------------------

sandbox_values = st.none() | st.fixed_dictionaries(
    {"sandbox_id": st.sampled_from(["s1", "s2"])}, optional={"extra": st.integers(0, 3)}
)


@FUZZ
@given(existing=sandbox_values, new=sandbox_values)
def test_sandbox_merge_keeps_one_sandbox_per_thread(
    existing: dict[str, Any] | None, new: dict[str, Any] | None
) -> None:
    conflict = existing is not None and new is not None and existing["sandbox_id"] != new["sandbox_id"]
    try:
        merged = merge_sandbox(existing, new)
    except SandboxConflictError:
        assert conflict
        return
    assert not conflict
    assert merged == (existing if existing is not None else new)
    assert merge_sandbox(merged, new) == merged, "idempotent"


images = st.dictionaries(
    st.sampled_from(["/a.png", "/b.png", "/c.png"]), st.fixed_dictionaries({"mime": st.sampled_from(["p", "j"])})
)


@FUZZ
@given(existing=images, new=st.none() | images)
def test_viewed_images_merge_by_path_later_wins_and_empty_clears(
    existing: dict[str, Any], new: dict[str, Any] | None
) -> None:
    merged = merge_viewed_images(existing, new)
    if new is None:
        assert merged == existing
    elif not new:
        assert merged == {}
    else:
        assert merged == {**existing, **new}
        assert merge_viewed_images(merged, new) == merged, "idempotent"


todo_lists = st.lists(
    st.fixed_dictionaries({"content": st.text(max_size=5), "status": st.sampled_from(["pending", "done"])})
)


@FUZZ
@given(existing=st.none() | todo_lists, new=st.none() | todo_lists)
def test_todos_keep_on_none_and_replace_otherwise(
    existing: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None
) -> None:
    merged = merge_todos(existing, new)
    assert merged == (existing if new is None else new)
    if new is not None:
        assert merged is not new, "the state never shares the update's list"


@FUZZ
@given(
    existing=st.none() | st.dictionaries(st.text(max_size=4), scalars),
    new=st.none() | st.dictionaries(st.text(max_size=4), scalars),
)
def test_goal_keeps_on_none_and_replaces_otherwise(existing: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    assert merge_goal(existing, new) == (existing if new is None else new)
