"""A tool approval in DeerFlow's app (real Temporal, real worker, real API server, ``langgraph-sdk`` sending what
the app sends): the paused thread's values end with an ``ask_clarification`` ToolMessage whose
``artifact.human_input`` is a Human Input Card with options approve / reject, and the card's answer — a hidden
HumanMessage with ``additional_kwargs.human_input_response`` — decides every waiting call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, UnprocessableEntityError
from temporalio.client import Client

from tests.support import thread_state
from tests.test_approval_clients import results, three_gated_turns
from vocabulary.approvals import approval_card
from workers.testing import make_config, running_worker, serving_api
from workers.worker import connect

GATED = {"rules": [{"tool": "bash", "args": {"command": "^echo"}, "allowed_decisions": ["approve", "reject"]}]}


@pytest.fixture
async def sdk(home: Path, temporal_address: str, client: Client) -> AsyncIterator[LangGraphClient]:
    config = make_config(
        home, temporal_address, model=three_gated_turns(home), run={"middlewares": {"tool_approval": GATED}}
    )
    async with running_worker(client, config), serving_api(config, await connect(config)) as url:
        yield get_client(url=url)


def app_message(text: str, response: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the app submits (``bytedance/deer-flow: frontend/src/core/threads/hooks.ts``,
    ``buildThreadSubmitMessages``; a card's answer: ``components/workspace/chats/chat-page.tsx``,
    ``handleSubmitHumanInput``)."""
    kwargs = {"hide_from_ui": True, "human_input_response": response} if response else {}
    return {"type": "human", "content": [{"type": "text", "text": text}], "additional_kwargs": kwargs}


def card_answer(card: dict[str, Any], *, option: str | None = None, text: str | None = None) -> dict[str, Any]:
    """``createHumanInputOptionResponse`` / ``createHumanInputTextResponse`` and ``buildHumanInputResponseText``
    (``frontend/src/core/messages/human-input.ts``)."""
    response = {
        "version": 1,
        "kind": "human_input_response",
        "source": card["source"],
        "request_id": card["request_id"],
    }
    if option is not None:
        response.update(response_kind="option", option_id=option, value=option)
    else:
        response.update(response_kind="text", value=text)
    return app_message(f'For your clarification "{card["question"]}", my answer is: {option or text}', response)


async def submit(sdk: LangGraphClient, thread_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """The app's submit (``runs.stream`` with its modes and options): the last ``values`` it reads."""
    last: dict[str, Any] = {}
    async for part in sdk.runs.stream(
        thread_id,
        "hartflow",
        input={"messages": [message]},
        stream_mode=["values", "messages-tuple", "custom"],
        stream_resumable=True,
        config={"recursion_limit": 1000},
        context={"thinking_enabled": True, "thread_id": thread_id},
    ):
        if part.event == "values":
            last = part.data
    return last


def card_of(values: dict[str, Any]) -> dict[str, Any]:
    """The card the app renders: the last message, a tool message named ``ask_clarification`` (``getMessageGroups``
    in ``frontend/src/core/messages/utils.ts``) with ``artifact.human_input`` (``extractHumanInputRequest``)."""
    last = values["messages"][-1]
    assert (last["type"], last["name"]) == ("tool", "ask_clarification")
    card: dict[str, Any] = last["artifact"]["human_input"]
    return card


async def test_the_app_renders_the_approval_as_a_card_and_its_answers_decide(sdk: LangGraphClient, home: Path) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    streamed = await submit(sdk, thread_id, app_message("go"))
    card = card_of(streamed)
    # parseHumanInputRequest's rules: version 1, the kind, a source, a request id, a question, a mode with options.
    assert {key: card[key] for key in ("version", "kind", "source", "input_mode")} == {
        "version": 1,
        "kind": "human_input_request",
        "source": "tool_approval",
        "input_mode": "choice_with_other",
    }
    assert card["request_id"] and "bash · command='echo first'" in card["question"]
    assert card["options"] == [
        {"id": "approve", "label": "Approve", "value": "approve"},
        {"id": "reject", "label": "Reject", "value": "reject"},
    ]
    assert card_of((await sdk.threads.get_state(thread_id))["values"]) == card  # a reload shows it too

    streamed = await submit(sdk, thread_id, card_answer(card, option="approve"))
    second = card_of(streamed)
    assert second["request_id"] != card["request_id"] and "echo second" in second["question"]

    # Refused with nothing written: an option the card does not offer (422), the first card again (409).
    with pytest.raises(UnprocessableEntityError):
        await submit(sdk, thread_id, card_answer(second, option="maybe"))
    with pytest.raises(ConflictError):
        await submit(sdk, thread_id, card_answer(card, option="reject"))
    assert thread_state(home, thread_id)["approvals"][-1]["status"] == "pending"

    third = card_of(await submit(sdk, thread_id, card_answer(second, text="too risky")))
    final = await submit(sdk, thread_id, card_answer(third, option="reject"))

    assert final["messages"][-1]["content"] == "all done"
    assert not any(m["name"] == "ask_clarification" for m in final["messages"] if m["type"] == "tool")
    ran = results(thread_state(home, thread_id))
    assert ran["b1"]["content"].startswith("first")
    assert ran["b2"]["status"] == "error" and ran["b2"]["content"] == "too risky"
    assert ran["b3"]["status"] == "error"
    audit = thread_state(home, thread_id)["approvals"]
    assert [(r["decisions"][0]["type"], r["decisions"][0]["via"]) for r in audit] == [
        ("approve", "update"),
        ("reject", "update"),
        ("reject", "update"),
    ]


def test_a_card_offers_only_what_every_call_allows() -> None:
    request = {
        "request_id": "approval:1",
        "tool_call_ids": ["a", "b"],
        "action_requests": [
            {"name": "bash", "args": {"command": "ls"}, "description": "d1"},
            {"name": "write_file", "args": {"path": "x"}, "description": "d2"},
        ],
        "review_configs": [
            {"action_name": "bash", "allowed_decisions": ["approve", "reject"]},
            {"action_name": "write_file", "allowed_decisions": ["approve", "edit"]},
        ],
    }
    card = approval_card(request)
    assert card is not None
    assert (card["input_mode"], [o["id"] for o in card["options"]]) == ("single_choice", ["approve"])
    request["review_configs"][1]["allowed_decisions"] = ["edit"]
    assert approval_card(request) is None
