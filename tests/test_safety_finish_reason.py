"""SafetyFinishReason: provider safety stops never run their tool calls, empty ones are backfilled, and the
middleware sees the response before LoopDetection; plus a real content_filter run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from pydantic import ValidationError
from temporalio.client import Client

from middlewares.chain import build_lead_chain, describe
from middlewares.run_settings import RunSettings
from middlewares.safety_finish_reason import (
    EMPTY_TEXT,
    SUPPRESSED_TEXT,
    AnthropicRefusalDetector,
    GeminiSafetyDetector,
    OpenAICompatibleContentFilterDetector,
    SafetyFinishReasonConfig,
    SafetyFinishReasonMiddleware,
    SafetyTermination,
)
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities

CONTENT_FILTER_TEXT = SUPPRESSED_TEXT.format(
    reason_field="finish_reason", reason_value="content_filter", detector="openai_compatible_content_filter"
)


def _ai(content: Any = "", tool_calls: list[dict[str, Any]] | None = None, **metadata: Any) -> AIMessage:
    return AIMessage(
        content=content,
        tool_calls=tool_calls or [],
        id="ai-1",
        response_metadata=metadata.pop("response_metadata", {}),
        additional_kwargs=metadata.pop("additional_kwargs", {}),
    )


async def _after(message: AIMessage, mw: SafetyFinishReasonMiddleware | None = None) -> tuple[Any, StubRunContext]:
    ctx = StubRunContext()
    update = await (mw or SafetyFinishReasonMiddleware()).after_model(ThreadState(messages=[message]), ctx)
    return update, ctx


WRITE = {"name": "write_file", "id": "w1", "args": {"path": "/mnt/user-data/outputs/r.md", "content": "half a sen"}}


# -- detectors ---------------------------------------------------------------------------------------------


def test_built_in_detectors_read_response_metadata_then_additional_kwargs() -> None:
    openai = OpenAICompatibleContentFilterDetector()
    hit = openai.detect(
        _ai(response_metadata={"finish_reason": "Content_Filter", "content_filter_results": {"hate": "high"}})
    )
    assert hit == SafetyTermination(
        "openai_compatible_content_filter",
        "finish_reason",
        "Content_Filter",
        {"content_filter_results": {"hate": "high"}},
    )
    assert openai.detect(_ai(additional_kwargs={"finish_reason": "content_filter"})) is not None
    assert openai.detect(_ai(response_metadata={"finish_reason": "stop"})) is None
    assert openai.detect(_ai(response_metadata={"finish_reason": {"weird": 1}})) is None

    assert AnthropicRefusalDetector().detect(_ai(response_metadata={"stop_reason": "refusal"})) == SafetyTermination(
        "anthropic_refusal", "stop_reason", "refusal"
    )
    assert AnthropicRefusalDetector().detect(_ai(response_metadata={"stop_reason": "end_turn"})) is None

    gemini = GeminiSafetyDetector()
    for reason in GeminiSafetyDetector.DEFAULT_FINISH_REASONS:
        assert gemini.detect(_ai(response_metadata={"finish_reason": reason.lower()})) is not None
    for reason in ("STOP", "MAX_TOKENS", "OTHER", "MALFORMED_FUNCTION_CALL"):
        assert gemini.detect(_ai(response_metadata={"finish_reason": reason})) is None
    rated = gemini.detect(_ai(response_metadata={"finish_reason": "SAFETY", "safety_ratings": [{"x": 1}]}))
    assert rated is not None and rated.extras == {"safety_ratings": [{"x": 1}]}


def test_configured_detectors_replace_the_built_ins() -> None:
    config = SafetyFinishReasonConfig.model_validate(
        {
            "detectors": [
                {
                    "use": "middlewares.safety_finish_reason:OpenAICompatibleContentFilterDetector",
                    "config": {"finish_reasons": ["sensitive"]},
                }
            ]
        }
    )
    mw = SafetyFinishReasonMiddleware.from_config(config)
    assert len(mw.detectors) == 1
    assert mw.detectors[0].detect(_ai(response_metadata={"finish_reason": "sensitive"})) is not None
    assert mw.detectors[0].detect(_ai(response_metadata={"finish_reason": "content_filter"})) is None
    assert len(SafetyFinishReasonMiddleware.from_config(SafetyFinishReasonConfig()).detectors) == 3


@pytest.mark.parametrize(
    ("detectors", "error"),
    [
        ([], "must be omitted (use built-ins) or contain at least one entry"),
        ([{"use": "no_colon"}], "must look like 'package.module:ClassName'"),
        ([{"use": "no.such.module:Detector"}], "cannot load detector"),
        ([{"use": "middlewares.safety_finish_reason:Nope"}], "cannot load detector"),
        ([{"use": "collections:OrderedDict"}], "did not produce a SafetyTerminationDetector"),
        (
            [{"use": "middlewares.safety_finish_reason:GeminiSafetyDetector", "config": {"colour": "red"}}],
            "cannot build detector",
        ),
    ],
)
def test_bad_detector_config_fails_when_the_config_loads(detectors: Any, error: str) -> None:
    with pytest.raises(ValidationError) as failure:
        SafetyFinishReasonConfig.model_validate({"detectors": detectors})
    assert error in str(failure.value)


# -- the rewrite -------------------------------------------------------------------------------------------


async def test_tool_calls_of_a_filtered_response_are_suppressed_and_recorded() -> None:
    message = _ai(
        "Writing the report:",
        [WRITE],
        response_metadata={"finish_reason": "content_filter"},
        additional_kwargs={
            "tool_calls": [{"id": "w1", "type": "function", "function": {"name": "write_file", "arguments": "{"}}],
            "function_call": {"name": "write_file", "arguments": "{"},
        },
    )
    update, ctx = await _after(message)
    [patched] = update["messages"]
    assert patched.id == "ai-1" and patched.tool_calls == []
    assert patched.content == f"Writing the report:\n\n{CONTENT_FILTER_TEXT}"
    assert patched.response_metadata["finish_reason"] == "content_filter", "the provider's reason is kept"
    assert patched.additional_kwargs == {
        "safety_termination": {
            "detector": "openai_compatible_content_filter",
            "reason_field": "finish_reason",
            "reason_value": "content_filter",
            "suppressed_tool_call_count": 1,
            "suppressed_tool_call_names": ["write_file"],
            "extras": {},
        }
    }
    assert ctx.stop_reason == "safety_capped"
    [event] = ctx.events
    assert event.kind == "safety_termination"
    assert event.data["suppressed_tool_call_ids"] == ["w1"]
    assert "half a sen" not in json.dumps(event.data), "tool arguments are never recorded"


async def test_a_blank_safety_stop_is_backfilled_and_a_visible_one_is_left_alone() -> None:
    update, ctx = await _after(_ai("", response_metadata={"stop_reason": "refusal"}))
    assert update["messages"][0].content == EMPTY_TEXT.format(
        reason_field="stop_reason", reason_value="refusal", detector="anthropic_refusal"
    )
    assert update["messages"][0].additional_kwargs["safety_termination"]["suppressed_tool_call_count"] == 0
    assert ctx.stop_reason == "safety_capped"

    visible, ctx = await _after(_ai("Here is what I can say.", response_metadata={"finish_reason": "SAFETY"}))
    assert visible is None and ctx.stop_reason is None


async def test_no_signal_or_a_broken_detector_changes_nothing() -> None:
    class Exploding:
        name = "exploding"

        def detect(self, message: AIMessage) -> SafetyTermination | None:
            raise RuntimeError("bug")

    normal, _ = await _after(_ai("", [WRITE], response_metadata={"finish_reason": "tool_calls"}))
    assert normal is None
    mw = SafetyFinishReasonMiddleware([Exploding(), OpenAICompatibleContentFilterDetector()])
    update, _ = await _after(_ai("", [WRITE], response_metadata={"finish_reason": "content_filter"}), mw)
    assert update["messages"][0].content == CONTENT_FILTER_TEXT


# -- placement and a real run ------------------------------------------------------------------------------


def test_safety_is_registered_after_loop_detection_and_before_clarification() -> None:
    names = describe(build_lead_chain(RunSettings()))
    assert names[-2:] == ["SafetyFinishReason", "Clarification"]
    assert names.index("LoopDetection") < names.index("SafetyFinishReason")
    disabled = RunSettings.model_validate(
        {"middlewares": {"safety_finish_reason": {"enabled": False}, "loop_detection": {"enabled": False}}}
    )
    assert {"SafetyFinishReason", "LoopDetection"}.isdisjoint(describe(build_lead_chain(disabled)))


async def test_a_content_filter_response_never_runs_its_tools(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    filtered = {
        "content": "",
        "tool_calls": [tool_call("write_file", "w1", path="/mnt/user-data/outputs/r.md", content="half a sen")],
        "response_metadata": {"finish_reason": "content_filter"},
    }
    model = write_script(home, [filtered, answer("never reached")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "write the report", model=model)
        final = await handle.result()
        activities = [name for name, _ in scheduled_activities(await history_events(handle))]
        progress = await handle.query("events", 0, result_type=list[dict[str, Any]])
    assert final.status == "completed" and final.stop_reason == "safety_capped"
    assert final.final_message == CONTENT_FILTER_TEXT
    assert "tool.execute" not in activities
    assert not list(home.glob("users/*/threads/*/user-data/outputs/r.md"))
    assert [e["detector"] for e in progress if e["kind"] == "safety_termination"] == [
        "openai_compatible_content_filter"
    ]
    state = thread_state(home, final.thread_id)
    last = state["messages"][-1]
    assert last["tool_calls"] == [] and last["additional_kwargs"]["safety_termination"][
        "suppressed_tool_call_names"
    ] == ["write_file"]


async def test_after_model_runs_safety_before_loop_detection(client: Client, home: Path, temporal_address: str) -> None:
    """The third identical call is also safety-filtered. Were LoopDetection first, it would count that call and
    force a loop stop (hard_limit 3); Safety first clears the calls, so LoopDetection sees nothing to count."""
    config = make_config(
        home, temporal_address, run={"middlewares": {"loop_detection": {"warn_threshold": 2, "hard_limit": 3}}}
    )
    ls = [calls(tool_call("ls", f"ls{i}", path="/mnt/user-data")) for i in range(2)]
    filtered = {
        **calls(tool_call("ls", "ls2", path="/mnt/user-data")),
        "response_metadata": {"finish_reason": "content_filter"},
    }
    model = write_script(home, [*ls, filtered, answer("never reached")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "look", model=model)
        final = await handle.result()
        progress = await handle.query("events", 0, result_type=list[dict[str, Any]])
    assert final.stop_reason == "safety_capped"
    assert final.final_message == CONTENT_FILTER_TEXT
    assert "[FORCED STOP]" not in (final.final_message or "")
    assert "loop_forced_stop" not in [e["kind"] for e in progress]
