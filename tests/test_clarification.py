"""Clarification: the request DeerFlow's UIs parse (options, forms with atomic validation, text fallback), the
reply protocol (validation, the hidden human_input_response message), and a form answered on a real run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from temporalio.client import Client, WorkflowUpdateFailedError

from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.clarification import (
    DISABLED_TEXT,
    MAX_FIELD_OPTIONS,
    MAX_FIELD_TEXT_CHARS,
    MAX_FORM_FIELDS,
    ClarificationMiddleware,
    format_text,
    normalize_fields,
    normalize_options,
)
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.human_input import InvalidReplyError, Reply, parse_reply, response_message, validate_reply
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events
from workflows import search_attributes as sa
from workflows.run import ReplyInput, RunView


async def _intercept(args: dict[str, Any], *, call_id: str = "call-1", non_interactive: bool = False) -> ToolResult:
    async def never(_: ToolCallRequest) -> ToolResult:
        raise AssertionError("ask_clarification must never be executed")

    request = ToolCallRequest(
        {"name": "ask_clarification", "id": call_id, "args": args}, None, ThreadState(), StubRunContext()
    )
    return await ClarificationMiddleware(non_interactive=non_interactive).wrap_tool_call(request, never)


def _field(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra}


FORM = [
    _field("env", label="Environment", type="select", required=True, options=["staging", "prod"]),
    _field("regions", label="Regions", type="multi_select", options=["eu", "us"]),
    _field("replicas", label="Replicas", type="number", required="true"),
    _field("go_live", label="Go-live date", type="date"),
    _field("notify", label="Notify the team", type="checkbox", required=1),
    _field("notes", type="textarea", placeholder="  anything else?  "),
]


# -- the request -------------------------------------------------------------------------------------------


async def test_choices_become_a_v1_request_with_the_icon_text_and_a_stable_id() -> None:
    args = {
        "question": "Which environment?",
        "clarification_type": "approach_choice",
        "context": "Two targets exist.",
        "options": ["staging", " prod ", "", "staging"],
    }
    result = await _intercept(args)
    assert isinstance(result, Command)
    [message] = result.update["messages"]
    assert isinstance(message, ToolMessage)
    assert message.id == "clarification:call-1" and message.tool_call_id == "call-1"
    assert message.name == "ask_clarification"
    assert message.content == "🔀 Two targets exist.\n\nWhich environment?\n\n  1. staging\n  2. prod"
    assert (
        result.interrupt
        == message.artifact["human_input"]
        == {
            "version": 1,
            "kind": "human_input_request",
            "source": "ask_clarification",
            "request_id": "clarification:call-1",
            "clarification_type": "approach_choice",
            "question": "Which environment?",
            "input_mode": "choice_with_other",
            "tool_call_id": "call-1",
            "context": "Two targets exist.",
            "options": [
                {"id": "option-1", "label": "staging", "value": "staging"},
                {"id": "option-2", "label": "prod", "value": "prod"},
            ],
        }
    )


@pytest.mark.parametrize(
    ("clarification_type", "icon"),
    [
        ("missing_info", "❓"),
        ("ambiguous_requirement", "🤔"),
        ("approach_choice", "🔀"),
        ("risk_confirmation", "⚠️"),
        ("suggestion", "💡"),
        ("something_else", "❓"),
    ],
)
def test_each_clarification_type_has_its_icon(clarification_type: str, icon: str) -> None:
    assert format_text({"question": "Q?", "clarification_type": clarification_type}, []) == f"{icon} Q?"


async def test_free_text_request_without_options_or_context() -> None:
    result = await _intercept({"question": "What name?"})
    assert isinstance(result, Command)
    assert result.interrupt is not None
    assert result.interrupt["input_mode"] == "free_text" and result.interrupt["version"] == 1
    assert result.interrupt["clarification_type"] == "missing_info"
    assert "options" not in result.interrupt and "context" not in result.interrupt
    assert result.update["messages"][0].content == "❓ What name?"


async def test_a_sound_form_becomes_a_v2_request_with_numbered_fields_in_the_text() -> None:
    result = await _intercept(
        {"question": "Deployment details?", "clarification_type": "missing_info", "fields": FORM, "options": ["x"]}
    )
    assert isinstance(result, Command) and result.interrupt is not None
    payload = result.interrupt
    assert (payload["version"], payload["input_mode"]) == (2, "form")
    assert "options" not in payload, "a form takes precedence over options"
    assert payload["fields"][0] == {
        "name": "env",
        "label": "Environment",
        "type": "select",
        "required": True,
        "options": [
            {"id": "env-option-1", "label": "staging", "value": "staging"},
            {"id": "env-option-2", "label": "prod", "value": "prod"},
        ],
    }
    assert [f["required"] for f in payload["fields"]] == [True, False, True, False, True, False]
    assert payload["fields"][5] == {
        "name": "notes",
        "label": "notes",
        "type": "textarea",
        "required": False,
        "placeholder": "anything else?",
    }
    assert result.update["messages"][0].content == "\n".join(
        [
            "❓ Deployment details?",
            "",
            "  1. Environment (required) — options: staging / prod",
            "  2. Regions — options: eu / us (multiple allowed)",
            "  3. Replicas (required)",
            "  4. Go-live date",
            "  5. Notify the team (required)",
            "  6. notes",
            "",
            "Please reply with a value for each field.",
        ]
    )


def test_benign_field_problems_are_fixed_in_place() -> None:
    fields = normalize_fields(
        json.dumps(
            [
                _field(" size ", type="dropdown"),
                _field("colour", type="select", options=[]),
                _field("shape", type=["select"], required="TRUE"),
                _field("mode", type="select", options='["<b>fast</b>", " slow ", "slow"]'),
            ]
        )
    )
    assert [(f["name"], f["type"], f["required"]) for f in fields] == [
        ("size", "text", False),
        ("colour", "text", False),
        ("shape", "text", True),
        ("mode", "select", False),
    ]
    assert [o["label"] for o in fields[3]["options"]] == ["fast", "slow"]


@pytest.mark.parametrize(
    "fields",
    [
        "not json",
        {"name": "a"},
        [_field(f"f{i}") for i in range(MAX_FORM_FIELDS + 1)],
        [_field("a"), "b"],
        [_field("  ")],
        [{"label": "no name"}],
        [_field("a"), _field("a")],
        [_field("__proto__")],
        [_field("toString")],
        [_field("x" * (MAX_FIELD_TEXT_CHARS + 1))],
        [_field("a", label="x" * (MAX_FIELD_TEXT_CHARS + 1))],
        [_field("a", placeholder="x" * (MAX_FIELD_TEXT_CHARS + 1))],
        [_field("a", type="select", options=[f"o{i}" for i in range(MAX_FIELD_OPTIONS + 1)])],
        [_field("a", type="select", options=["x" * (MAX_FIELD_TEXT_CHARS + 1)])],
        # Within every per-item cap, but over the 16 KiB budget for the whole form.
        [_field(f"f{i}", type="multi_select", options=[f"{i}-{j}-" + "é" * 150 for j in range(8)]) for i in range(8)],
    ],
)
async def test_any_structural_violation_drops_the_whole_form(fields: Any) -> None:
    assert normalize_fields(fields) == []
    result = await _intercept({"question": "Q?", "fields": fields, "options": ["a", "b"]})
    assert isinstance(result, Command) and result.interrupt is not None
    assert result.interrupt["input_mode"] == "choice_with_other" and result.interrupt["version"] == 1
    assert "fields" not in result.interrupt


def test_options_are_decoded_flattened_stripped_and_deduplicated() -> None:
    assert normalize_options('["a", "b"]') == ["a", "b"]
    assert normalize_options("just one") == ["just one"]
    assert normalize_options({"option": [{"label": "x"}, {"label": "<i>y</i>"}], "n": 3}) == ["x", "y", "3"]
    assert normalize_options([" a ", "", None, "a", "<br/>"]) == ["a", "None"]
    assert normalize_options(None) == []
    assert normalize_options(7) == ["7"]


async def test_without_a_tool_call_id_the_request_id_hashes_the_text() -> None:
    result = await _intercept({"question": "Q?"}, call_id="")
    assert isinstance(result, Command)
    assert result.update["messages"][0].id.startswith("clarification:")
    assert len(result.update["messages"][0].id) == len("clarification:") + 16


async def test_non_interactive_runs_get_the_disabled_message_and_other_tools_pass_through() -> None:
    result = await _intercept({"question": "Q?"}, non_interactive=True)
    assert isinstance(result, ToolMessage)
    assert (result.content, result.id, result.name) == (DISABLED_TEXT, "clarification:call-1", "ask_clarification")

    async def ran(request: ToolCallRequest) -> ToolResult:
        return ToolMessage("ran", tool_call_id=request.call_id)

    other = ToolCallRequest({"name": "bash", "id": "b", "args": {}}, None, ThreadState(), StubRunContext())
    passed = await ClarificationMiddleware().wrap_tool_call(other, ran)
    assert isinstance(passed, ToolMessage) and passed.content == "ran"


# -- the reply ---------------------------------------------------------------------------------------------


async def _form_request() -> dict[str, Any]:
    result = await _intercept({"question": "Deployment details?", "fields": FORM})
    assert isinstance(result, Command) and result.interrupt is not None
    return result.interrupt


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply(answer="just do it"), "missing required field(s): env, replicas, notify"),
        (Reply(fields={"env": "prod", "replicas": "2"}), "missing required field(s): notify"),
        (Reply(fields={"env": "qa", "replicas": 2, "notify": True}), "'qa' is not one of the offered options"),
        (Reply(fields={"env": "prod", "replicas": "two", "notify": True}), "field 'replicas' must be a number"),
        (Reply(fields={"env": "prod", "replicas": 2, "notify": "maybe"}), "field 'notify' must be true or false"),
        (Reply(fields={"env": "prod", "replicas": 2, "notify": 1, "go_live": "soon"}), "must be a date"),
        (Reply(fields={"env": "prod", "replicas": 2, "notify": 1, "regions": "eu,asia"}), "'asia' is not one"),
        (Reply(fields={"env": "prod", "colour": "red"}), "unknown field(s): colour"),
        (Reply(option_id="option-1"), "unknown option 'option-1'; offered: none"),
    ],
)
async def test_form_replies_are_validated(reply: Reply, error: str) -> None:
    with pytest.raises(InvalidReplyError) as failure:
        validate_reply(await _form_request(), reply)
    assert error in str(failure.value)


async def test_a_form_reply_becomes_deerflows_readable_summary() -> None:
    request = await _form_request()
    reply = Reply(
        answer="thanks",
        fields={"env": "env-option-2", "regions": "us, eu", "replicas": "3", "notify": "yes", "notes": " "},
    )
    validate_reply(request, reply)
    message = response_message(request, reply, message_id="m1")
    summary = "Environment: prod; Regions: us, eu; Replicas: 3; Notify the team: yes; thanks"
    assert message.content == f'For your clarification "Deployment details?", my answer is: {summary}'
    assert message.id == "m1"
    assert message.additional_kwargs == {
        "hide_from_ui": True,
        "human_input_response": {
            "version": 1,
            "kind": "human_input_response",
            "source": "ask_clarification",
            "request_id": "clarification:call-1",
            "response_kind": "text",
            "value": summary,
        },
    }


async def test_option_and_text_replies() -> None:
    result = await _intercept({"question": "Colour?", "options": ["red", "blue"]})
    assert isinstance(result, Command) and result.interrupt is not None
    request = result.interrupt
    with pytest.raises(InvalidReplyError, match="not both"):
        validate_reply(request, Reply(answer="red", option_id="option-1"))
    with pytest.raises(InvalidReplyError, match="the answer is empty"):
        validate_reply(request, Reply(answer="  "))
    validate_reply(request, Reply(answer="green"))  # choice_with_other: an answer of one's own is fine
    option = response_message(request, Reply(option_id="option-2"), message_id="m")
    assert option.content == 'For your clarification "Colour?", my answer is: blue'
    assert option.additional_kwargs["human_input_response"]["response_kind"] == "option"
    text = response_message(request, Reply(answer=" green "), message_id="m")
    assert text.additional_kwargs["human_input_response"]["value"] == "green"


def test_signal_payloads_are_parsed_leniently_but_never_guessed() -> None:
    assert parse_reply("blue") == Reply(answer="blue")
    assert parse_reply({"fields": {"a": 1}, "request_id": "r"}) == Reply(fields={"a": 1}, request_id="r")
    for bad in (42, ["blue"], {"answer": 1}, {"fields": ["a"]}, {"colour": "blue"}):
        with pytest.raises(InvalidReplyError):
            parse_reply(bad)


# -- on a real run -----------------------------------------------------------------------------------------


async def test_a_form_pause_rejects_bad_updates_without_history_and_accepts_a_good_one(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    ask = tool_call(
        "ask_clarification", "ask1", question="Deployment details?", clarification_type="missing_info", fields=FORM
    )
    model = write_script(home, [calls(ask), answer("Deploying.")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "deploy", model=model)
        view = await settle(handle)
        assert view.status == "awaiting_input"
        assert view.pending_input is not None and view.pending_input["input_mode"] == "form"
        description = await handle.describe()
        assert description.typed_search_attributes.get(sa.STATUS) == "awaiting_input"
        details = (await handle.query("__temporal_workflow_metadata")).current_details
        assert "**Waiting for an answer:** Deployment details?" in details
        assert "field `env` (select, required): Environment — staging / prod" in details

        before = len(await history_events(handle))
        bad = [
            ReplyInput(answer="whatever"),
            ReplyInput(fields={"env": "prod", "replicas": "2"}),
            ReplyInput(fields={"env": "qa", "replicas": "2", "notify": "no"}),
            ReplyInput(fields={"env": "prod", "replicas": "2", "notify": "no", "extra": "x"}),
        ]
        errors = []
        for reply in bad:
            with pytest.raises(WorkflowUpdateFailedError) as failure:
                await handle.execute_update("reply", reply, result_type=RunView)
            errors.append(str(failure.value.cause))
        assert len(await history_events(handle)) == before, "a rejected update leaves no history event"
        assert "missing required field(s): env, replicas, notify" in errors[0]
        assert "missing required field(s): notify" in errors[1]
        assert "'qa' is not one of the offered options" in errors[2]
        assert "unknown field(s): extra" in errors[3]

        good = ReplyInput(fields={"env": "2", "replicas": "2", "notify": "no"})
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("reply", good, result_type=RunView)  # "2" is neither id, label nor value
        good.fields["env"] = "prod"
        await handle.execute_update("reply", good, result_type=RunView)
        final = await handle.result()
    assert final.status == "completed" and final.final_message == "Deploying."
    state = thread_state(home, final.thread_id)
    reply = state["messages"][-2]
    assert reply["content"] == (
        'For your clarification "Deployment details?", my answer is: '
        "Environment: prod; Replicas: 2; Notify the team: no"
    )
    assert reply["additional_kwargs"]["human_input_response"]["request_id"] == "clarification:ask1"
