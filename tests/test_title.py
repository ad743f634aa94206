"""Title: when a thread is titled, by the model or the local fallback, and never twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from temporalio.client import Client

from middlewares.title import (
    FALLBACK_TITLE,
    TitleConfig,
    TitleMiddleware,
    fallback_title,
    parse_title,
    should_title,
    title_prompt,
)
from tests.support import StubRunContext, activity_error, start_run, thread_state
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput
from vocabulary.state import ThreadState
from workers.testing import answer, make_config, running_worker, settle, write_script
from workers.testing.history import history_events, scheduled_activities

REMINDER = {"hide_from_ui": True, "dynamic_context_reminder": True}


def _exchange(user: str = "Plan the quarterly report", reply: str = "Sure, here is a plan") -> list[BaseMessage]:
    return [HumanMessage(user, id="h1"), AIMessage(reply, id="a1")]


class TitleModel:
    def __init__(self, reply: str | BaseException) -> None:
        self.reply = reply
        self.inputs: list[ModelCallInput] = []

    async def __call__(self, arg: ModelCallInput) -> AIMessage:
        self.inputs.append(arg)
        if isinstance(self.reply, BaseException):
            raise self.reply
        return AIMessage(self.reply, id="t")


async def _after_model(
    state: ThreadState, title_model: TitleModel | None = None, **config: Any
) -> dict[str, Any] | None:
    ctx = StubRunContext(activities={MODEL_INVOKE: title_model} if title_model else {})
    return await TitleMiddleware(TitleConfig(**config)).after_model(state, ctx)


def test_only_the_first_complete_exchange_is_titled() -> None:
    config = TitleConfig()
    assert should_title(ThreadState(messages=_exchange()), config)
    assert not should_title(ThreadState(messages=_exchange()[:1]), config), "no answer yet"
    assert not should_title(ThreadState(messages=_exchange(), title="Kept"), config)
    second = [*_exchange(), HumanMessage("and then?", id="h2"), AIMessage("then this", id="a2")]
    assert not should_title(ThreadState(messages=second), config)
    assert not should_title(ThreadState(messages=_exchange()), TitleConfig(enabled=False))
    # DynamicContext's ID swap leaves a reminder pair and the user's copy: still one user message.
    swapped = [
        SystemMessage("<system-reminder>…</system-reminder>", id="X", additional_kwargs=REMINDER),
        HumanMessage("<memory>…</memory>", id="X__memory", additional_kwargs=REMINDER),
        HumanMessage("Plan the quarterly report", id="X__user"),
        AIMessage("Sure", id="a1"),
    ]
    assert should_title(ThreadState(messages=swapped), config)
    assert should_title(ThreadState(messages=_exchange()[:1]), config, allow_partial_exchange=True)


def test_fallback_title_limits() -> None:
    config = TitleConfig()
    assert fallback_title("short question", config) == "short question"
    long = "word " * 30
    assert fallback_title(long, config) == long[:50].rstrip() + "..."
    assert fallback_title(long, TitleConfig(max_chars=20)) == long[:17].rstrip() + "..."
    assert len(fallback_title("x" * 100, TitleConfig(max_chars=20))) == 20
    assert fallback_title("  ", config) == FALLBACK_TITLE


def test_model_output_is_cleaned() -> None:
    config = TitleConfig(max_chars=15)
    assert parse_title('<THINK>\nwhich words?\n</think>\n"Report Plan"', config) == "Report Plan"
    assert parse_title([{"type": "text", "text": "'A very long title indeed'"}], config) == "A very long tit"


def test_the_prompt_takes_500_characters_of_each_side() -> None:
    state = ThreadState(messages=_exchange("u" * 600, "<think>private</think>" + "a" * 600))
    prompt = title_prompt(state, TitleConfig())
    assert prompt == (
        "Generate a concise title (max 6 words) for this conversation.\n"
        f"User: {'u' * 500}\nAssistant: {'a' * 500}\n\n"
        "Return ONLY the title, no quotes, no explanation."
    )


async def test_titled_by_the_model_when_one_is_configured() -> None:
    model = TitleModel("<think>hmm</think> 'Quarterly Report Plan'")
    update = await _after_model(ThreadState(messages=_exchange()), model, model="openai:small")
    assert update == {"title": "Quarterly Report Plan"}
    [call] = model.inputs
    assert (call.model, call.purpose, call.call_index) == ("openai:small", "title", 0)


async def test_failures_fall_back_locally() -> None:
    state = ThreadState(messages=_exchange())
    for reply in (activity_error(RuntimeError("down")), "<think>only thoughts</think>"):
        update = await _after_model(state, TitleModel(reply), model="openai:small")
        assert update == {"title": "Plan the quarterly report"}
    assert await _after_model(state) == {"title": "Plan the quarterly report"}, "no model: no call"


async def test_an_attachment_only_message_is_not_sent_to_the_model() -> None:
    message = HumanMessage(
        "<current_uploads>…</current_uploads>\n\n", id="h1", additional_kwargs={"original_user_content": ""}
    )
    model = TitleModel("never")
    update = await _after_model(ThreadState(messages=[message, AIMessage("ok", id="a1")]), model, model="m:x")
    assert update == {"title": FALLBACK_TITLE} and not model.inputs


async def test_a_run_that_ended_before_any_answer_still_gets_a_title() -> None:
    middleware, ctx = TitleMiddleware(), StubRunContext()
    state = ThreadState(messages=_exchange()[:1])
    assert await middleware.after_agent(state, ctx) == {"title": "Plan the quarterly report"}
    assert await middleware.after_agent(ThreadState(messages=_exchange(), title="Set"), ctx) is None


async def test_a_run_is_titled_by_the_scripted_title_model_once(
    client: Client, home: Path, temporal_address: str
) -> None:
    script = write_script(home, [answer("Here is the plan."), {"for": "title", "content": '"Quarterly Plan"'}])
    config = make_config(home, temporal_address, run={"middlewares": {"title": {"model": script}}})
    async with running_worker(client, config):
        handle = await start_run(client, config, "Plan the quarterly report", model=script)
        view = await settle(handle)
        activities = scheduled_activities(await history_events(handle))
        # A second run on the thread must not title it again (the script has no second title entry).
        second = await start_run(
            client, config, "Now the budget", model=write_script(home, [answer("ok")]), thread_id=view.thread_id
        )
        assert (await settle(second)).status == "completed"
    assert view.status == "completed"
    assert ("model.invoke", "Title.after_model · generate title") in activities
    assert thread_state(home, view.thread_id)["title"] == "Quarterly Plan"


async def test_without_a_title_model_the_fallback_titles_the_run(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    message = "Summarise the findings of the latest customer survey for the board meeting"
    async with running_worker(client, config):
        handle = await start_run(client, config, message, model=write_script(home, [answer("ok")]))
        view = await settle(handle)
    assert thread_state(home, view.thread_id)["title"] == message[:50].rstrip() + "..."
