"""ToolOutputBudget: DeerFlow's pins (thresholds, exemptions, overrides, fallback bound, snapping, synopsis
kinds, request-only history budgeting) on the pure logic, and externalisation on real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import ValidationError
from temporalio.client import Client

from activities.sandbox.local import LocalSandboxProvider
from activities.thread_files import ThreadFiles
from activities.tool_output import ToolOutputActivities
from middlewares._tool_output_synopsis import raw_sample, render_tool_output_preview, synopsize
from middlewares.base import Command, ModelRequest, ToolCallRequest, ToolResult
from middlewares.tool_output_budget import (
    FALLBACK_MARKER,
    ToolOutputBudgetMiddleware,
    ToolOutputConfig,
    budget_text,
    externalized_filename,
    over_budget,
    tool_text,
    truncate_head_tail,
)
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.contracts import TOOL_OUTPUT_EXTERNALIZE, ExternalizeInput, ExternalizeResult, ThreadRef
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities

DEFAULT = ToolOutputConfig()
RESULTS = "/mnt/user-data/outputs/.tool-results"


def _lines(count: int, width: int = 10) -> str:
    return "".join(f"{i:0{width - 1}d}\n" for i in range(count))


# -- thresholds, exemptions, overrides ---------------------------------------------------------------------


def test_exactly_at_the_threshold_passes_and_one_more_char_triggers() -> None:
    at, above = "x" * 12_000, "x" * 12_001
    assert not over_budget(ToolMessage(at, tool_call_id="c", name="bash"), DEFAULT)
    assert budget_text(at, tool="bash", config=DEFAULT, saved_to=f"{RESULTS}/f.log") is None
    assert over_budget(ToolMessage(above, tool_call_id="c", name="bash"), DEFAULT)
    preview = budget_text(above, tool="bash", config=DEFAULT, saved_to=f"{RESULTS}/f.log")
    assert preview is not None
    assert preview.startswith(f"[Full bash output saved to {RESULTS}/f.log (12001 chars, ~3000 tokens).]")


def test_read_file_is_exempt_whatever_its_size() -> None:
    huge = "x" * 100_000
    for name in ("read_file", "read_file_tool"):
        assert not over_budget(ToolMessage(huge, tool_call_id="c", name=name), DEFAULT)
    assert over_budget(ToolMessage(huge, tool_call_id="c", name="bash"), DEFAULT)


def test_per_tool_overrides_and_zero_disables_externalisation() -> None:
    config = ToolOutputConfig(tool_overrides={"grep": 100, "bash": 0})
    assert over_budget(ToolMessage("x" * 101, tool_call_id="c", name="grep"), config)
    assert not over_budget(ToolMessage("x" * 100, tool_call_id="c", name="grep"), config)
    # bash: never saved, but the fallback still bounds it.
    assert budget_text("x" * 29_000, tool="bash", config=config, saved_to=f"{RESULTS}/f.log") is None
    cut = budget_text("x" * 40_000, tool="bash", config=config, saved_to=f"{RESULTS}/f.log")
    assert cut is not None and len(cut) <= 30_000 and "Persistent storage unavailable" in cut
    off = ToolOutputConfig(externalize_min_chars=0, fallback_max_chars=0)
    assert not over_budget(ToolMessage("x" * 1_000_000, tool_call_id="c", name="bash"), off)


def test_unsaved_output_is_cut_only_beyond_fallback_max() -> None:
    assert budget_text("x" * 30_000, tool="bash", config=DEFAULT, saved_to=None) is None
    cut = budget_text("x" * 30_001, tool="bash", config=DEFAULT, saved_to=None)
    assert cut is not None and len(cut) <= 30_000


def test_only_text_results_are_budgeted() -> None:
    assert tool_text("plain") == "plain"
    assert tool_text(["a", {"type": "text", "text": "b"}]) == "a\nb"
    assert tool_text([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]) is None
    assert tool_text([]) is None
    image_heavy = ToolMessage([{"type": "image_url", "image_url": {"url": "x" * 50_000}}], tool_call_id="c")
    assert not over_budget(image_heavy, DEFAULT)


def test_config_rejects_bad_storage_subdirs_and_unknown_keys() -> None:
    for bad in ("a/b", "..", ".", "", "a\\b"):
        with pytest.raises(ValidationError):
            ToolOutputConfig(storage_subdir=bad)
    with pytest.raises(ValidationError):
        ToolOutputConfig.model_validate({"externalise_min_chars": 5})
    with pytest.raises(ValidationError):
        ToolOutputConfig(tool_overrides={"bash": -1})


def test_externalized_filenames_are_deterministic_and_sanitised() -> None:
    name = externalized_filename("bash", "call-1", "content")
    assert name == externalized_filename("bash", "call-1", "content")
    assert name.startswith("bash-") and name.endswith(".log") and len(name) == len("bash-") + 12 + len(".log")
    assert externalized_filename("grep", "call-1", "content").endswith(".txt")
    assert externalized_filename("web_fetch", "c", "x").endswith(".log")
    assert externalized_filename("bash", "call-2", "content") != name
    assert externalized_filename("bash", "call-1", "other") != name
    # The id is framed by its length, so moving a boundary between id and content changes the name.
    assert externalized_filename("bash", "ab", "c") != externalized_filename("bash", "a", "bc")
    assert "/" not in externalized_filename("../../etc/passwd", "c", "x")
    assert externalized_filename("..", "c", "x").startswith("unknown-")


# -- fallback truncation -----------------------------------------------------------------------------------


@given(
    text=st.text(alphabet="ab\n", max_size=3_000),
    max_chars=st.integers(min_value=1, max_value=3_000),
    head=st.integers(min_value=0, max_value=3_000),
    tail=st.integers(min_value=0, max_value=3_000),
)
def test_fallback_never_exceeds_max_chars(text: str, max_chars: int, head: int, tail: int) -> None:
    cut = truncate_head_tail(text, tool="bash", max_chars=max_chars, head_chars=head, tail_chars=tail)
    assert len(cut) <= max_chars
    if len(text) <= max_chars:
        assert cut == text


def test_fallback_keeps_whole_lines_and_counts_what_it_omits() -> None:
    text = _lines(5_000)  # 50,000 chars of 10-char lines
    cut = truncate_head_tail(text, tool="bash", max_chars=30_000, head_chars=8_000, tail_chars=3_000)
    head, marker_and_tail = cut.split("\n\n[... ", 1)
    omitted = int(marker_and_tail.split(" ", 1)[0])
    marker = FALLBACK_MARKER.format(omitted=omitted, tool="bash")
    tail = cut[len(head) + len(marker) :]
    assert cut == head + marker + tail
    assert marker == (
        f"\n\n[... {omitted} chars omitted from bash output. Persistent storage unavailable. "
        "Consider narrowing the query or using more specific parameters.]\n\n"
    )
    assert text.startswith(head) and text.endswith(tail)
    assert head.endswith("\n") and len(head) <= 8_000  # the head end snapped back to a line break
    assert text[len(text) - len(tail) - 1] == "\n" and len(tail) <= 3_000  # the tail starts a line
    assert omitted == len(text) - len(head) - len(tail)


def test_a_marker_longer_than_the_budget_degrades_to_a_plain_cut() -> None:
    assert truncate_head_tail("x" * 500, tool="bash", max_chars=50, head_chars=10, tail_chars=10) == "x" * 50


# -- previews ------------------------------------------------------------------------------------------------


def test_preview_format_and_newline_snapped_raw_sample() -> None:
    text = _lines(2_000)  # 20,000 chars
    path = f"{RESULTS}/bash-0123456789ab.log"
    preview = render_tool_output_preview(text, tool_name="bash", virtual_path=path, head_chars=2_000, tail_chars=1_000)
    lines = preview.splitlines()
    assert lines[0] == f"[Full bash output saved to {path} (20000 chars, ~5000 tokens).]"
    assert lines[1] == "[Preview kind: text. This is a structured synopsis, not a raw head/tail truncation.]"
    assert lines[-2:] == [
        "Access:",
        f"- Use read_file on {path} with start_line and end_line to inspect the raw output.",
    ]
    sample = preview.split("Raw sample (head + tail, clipped to head_chars / tail_chars):\n", 1)[1]
    sample = sample.split("\n\nAccess:", 1)[0]
    head, tail = sample.split("\n...\n")
    assert text.startswith(head + "\n") and len(head) < 2_000  # ends on a whole line, before its newline
    assert text.endswith(tail) and text[-len(tail) - 1] == "\n" and len(tail) < 1_000
    assert "Opening excerpt" not in preview  # the raw sample already shows the head


def test_raw_sample_is_the_whole_content_when_it_fits() -> None:
    assert raw_sample("abc\ndef", 5, 5) == "abc\ndef"
    assert raw_sample("abc", 0, 0) == ""


@pytest.mark.parametrize(
    ("kind", "content"),
    [
        ("json", json.dumps({"items": [{"id": i, "name": f"n{i}"} for i in range(50)], "meta": {"count": 50}})),
        ("csv", "id,name,score\n" + "".join(f"{i},n{i},{i * 2}\n" for i in range(20))),
        ("tsv", "id\tname\tscore\n" + "".join(f"{i}\tn{i}\t{i * 2}\n" for i in range(20))),
        ("yaml", "name: demo\nserver:\n  host: a\n  port: 1\nitems:\n" + "".join(f"  - n{i}\n" for i in range(20))),
        ("xml", "<root a='1'>" + "".join(f"<item id='{i}'>x</item>" for i in range(20)) + "</root>"),
        ("code", "import os\nfrom x import y\n\n" + "".join(f"def f{i}():\n    return {i}\n\n" for i in range(20))),
        ("text", "# Title\n" + "".join(f"line {i} of plain prose, nothing more.\n" for i in range(20))),
        ("unknown", "\x01\x02" * 600),
        ("unknown", ""),
    ],
)
def test_synopsis_kinds(kind: str, content: str) -> None:
    assert synopsize(content).kind == kind
    preview = render_tool_output_preview(content, tool_name="t", virtual_path="/p", head_chars=2_000, tail_chars=1_000)
    assert f"[Preview kind: {kind}. " in preview


def test_synopsis_details_by_kind() -> None:
    json_synopsis = synopsize(json.dumps({"items": [{"id": 1}], "meta": {"count": 1}}))
    assert json_synopsis.summary == ["JSON object with 2 top-level keys.", "Top-level keys: items, meta"]
    assert "$.items: array length 1; first item object" in json_synopsis.structure
    assert "$.items[0].id: 1" in json_synopsis.notable
    table = synopsize("id,name\n" + "".join(f"{i},n{i}\n" for i in range(7)))
    assert table.summary == ["CSV table with 7 data rows and 2 columns."]
    assert table.structure == ["columns: id, name", "first data row: id=0 | name=n0"]
    # Logs are not YAML, ls -l listings are not tables, prose with a comma is not CSV.
    assert synopsize("INFO: a\nWARN: b\nERROR: c\nINFO: d\n").kind == "text"
    assert synopsize("-rw-r--r-- 1 a b\n" * 10).kind == "text"
    assert synopsize("Hello, world. This is prose.\nMore prose, with commas.\n").kind == "text"


# -- the hooks -----------------------------------------------------------------------------------------------


def _tool_request(
    ctx: StubRunContext, name: str = "bash", call_id: str = "c1", state: ThreadState | None = None
) -> ToolCallRequest:
    return ToolCallRequest({"name": name, "args": {}, "id": call_id}, None, state or ThreadState(), ctx)


async def _wrap(
    mw: ToolOutputBudgetMiddleware, ctx: StubRunContext, result: ToolResult, state: ThreadState | None = None
) -> ToolResult:
    async def handler(_: ToolCallRequest) -> ToolResult:
        return result

    return await mw.wrap_tool_call(_tool_request(ctx, state=state), handler)


async def test_a_saved_output_becomes_its_preview_and_the_path_names_the_call() -> None:
    saved: list[ExternalizeInput] = []

    async def externalize(arg: ExternalizeInput) -> ExternalizeResult:
        saved.append(arg)
        return ExternalizeResult(True)

    ctx = StubRunContext(activities={TOOL_OUTPUT_EXTERNALIZE: externalize})
    text = _lines(2_000)
    message = ToolMessage(text, tool_call_id="c1", name="bash", id="m")
    state = ThreadState(sandbox={"sandbox_id": "local:default:thread-1"})
    result = await _wrap(ToolOutputBudgetMiddleware(), ctx, message, state)
    assert isinstance(result, ToolMessage) and result.id == "m"
    [arg] = saved
    assert arg.path == f"{RESULTS}/{externalized_filename('bash', 'c1', text)}"
    assert arg.content == text and arg.sandbox_id == "local:default:thread-1"
    assert arg.thread == ThreadRef("default", "thread-1")
    assert str(result.content).startswith(f"[Full bash output saved to {arg.path} (20000 chars")
    assert ctx.calls[0][2] == "ToolOutputBudget.wrap_tool_call · save bash output"


async def test_a_saved_output_goes_to_the_sandbox_the_call_just_acquired() -> None:
    """Sandbox (inside this wrapper) writes a newly learnt id into the result: that is where the output goes."""
    saved: list[ExternalizeInput] = []

    async def externalize(arg: ExternalizeInput) -> ExternalizeResult:
        saved.append(arg)
        return ExternalizeResult(True)

    ctx = StubRunContext(activities={TOOL_OUTPUT_EXTERNALIZE: externalize})
    message = ToolMessage(_lines(2_000), tool_call_id="c1", name="bash", id="m")
    command = Command(update={"sandbox": {"sandbox_id": "sb-new"}, "messages": [message]})
    await _wrap(ToolOutputBudgetMiddleware(), ctx, command)
    assert [arg.sandbox_id for arg in saved] == ["sb-new"]


async def test_a_failed_save_falls_back_to_truncation_beyond_fallback_max_only() -> None:
    async def refuse(_: ExternalizeInput) -> ExternalizeResult:
        return ExternalizeResult(False, "no live sandbox")

    ctx = StubRunContext(activities={TOOL_OUTPUT_EXTERNALIZE: refuse})
    mw = ToolOutputBudgetMiddleware()
    medium = ToolMessage("x" * 20_000, tool_call_id="c1", name="bash")
    assert await _wrap(mw, ctx, medium) is medium
    big = await _wrap(mw, ctx, ToolMessage(_lines(5_000), tool_call_id="c1", name="bash"))
    assert isinstance(big, ToolMessage) and len(str(big.content)) <= 30_000
    assert "chars omitted from bash output. Persistent storage unavailable." in str(big.content)


async def test_small_and_exempt_results_cause_no_activity() -> None:
    ctx = StubRunContext()  # no activities: any call would fail
    mw = ToolOutputBudgetMiddleware()
    small = ToolMessage("ok", tool_call_id="c1", name="bash")
    assert await _wrap(mw, ctx, small) is small
    exempt = ToolMessage("x" * 100_000, tool_call_id="c1", name="read_file")
    assert await _wrap(mw, ctx, exempt) is exempt
    disabled = ToolOutputBudgetMiddleware(ToolOutputConfig(enabled=False))
    big = ToolMessage("x" * 100_000, tool_call_id="c1", name="bash")
    assert await _wrap(disabled, ctx, big) is big
    assert ctx.calls == []


async def test_tool_messages_inside_a_command_are_budgeted() -> None:
    async def externalize(_: ExternalizeInput) -> ExternalizeResult:
        return ExternalizeResult(True)

    ctx = StubRunContext(activities={TOOL_OUTPUT_EXTERNALIZE: externalize})
    big = ToolMessage("y" * 13_000, tool_call_id="c1", name="task")
    command = Command(update={"messages": [big, AIMessage("x")], "artifacts": ["/a"]}, interrupt={"q": 1})
    result = await _wrap(ToolOutputBudgetMiddleware(), ctx, command)
    assert isinstance(result, Command) and result.interrupt == {"q": 1} and result.update["artifacts"] == ["/a"]
    patched, other = result.update["messages"]
    assert str(patched.content).startswith("[Full task output saved to") and other.content == "x"
    assert command.update["messages"][0] is big  # the original command is untouched


async def test_history_is_rebudgeted_in_the_request_only() -> None:
    ctx = StubRunContext()
    old = ToolMessage(_lines(5_000), tool_call_id="c0", name="bash", id="t0")
    state = ThreadState(messages=[HumanMessage("hi", id="h"), AIMessage("", id="a"), old])
    request = ModelRequest(list(state.messages), SystemMessage("s"), [], state, ctx, "m")
    seen: list[ModelRequest] = []

    async def model(req: ModelRequest) -> AIMessage:
        seen.append(req)
        return AIMessage("done")

    await ToolOutputBudgetMiddleware().wrap_model_call(request, model)
    sent = seen[0].messages[2]
    assert (
        sent.id == "t0" and len(str(sent.content)) <= 30_000 and "Persistent storage unavailable" in str(sent.content)
    )
    assert state.messages[2] is old and old.content == _lines(5_000)  # thread state untouched
    assert ctx.calls == []  # the history path never saves


# -- the activity and a real run -----------------------------------------------------------------------------


def test_externalize_activity_writes_the_thread_files_with_or_without_a_live_sandbox(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path)
    activities = ToolOutputActivities(ThreadFiles.on_disk(tmp_path))
    thread = ThreadRef("default", "t1")
    outputs = tmp_path / "users/default/threads/t1/user-data/outputs/.tool-results"
    sandbox_id = provider.acquire("default", "t1")
    assert activities.externalize(ExternalizeInput(thread, sandbox_id, f"{RESULTS}/a.log", "A\n")).saved
    assert (outputs / "a.log").read_text() == "A\n"
    # No live sandbox: the file goes to the thread's files all the same.
    assert activities.externalize(ExternalizeInput(ThreadRef("default", "t2"), None, f"{RESULTS}/b.log", "B")).saved
    assert (tmp_path / "users/default/threads/t2/user-data/outputs/.tool-results/b.log").read_text() == "B"
    escaped = activities.externalize(ExternalizeInput(thread, None, "/mnt/user-data/outputs/../../x", "C"))
    assert not escaped.saved and escaped.error
    outside = activities.externalize(ExternalizeInput(thread, None, "/etc/x", "C"))
    assert not outside.saved


async def test_an_oversized_bash_output_is_saved_previewed_and_readable_later(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    output = _lines(1_600)  # 16,000 chars: over the 12,000 threshold, under bash's own 20,000 cap
    path = f"{RESULTS}/{externalized_filename('bash', 'b1', output)}"
    script = [
        calls(tool_call("bash", "b1", command="for i in $(seq 0 1599); do printf '%09d\\n' $i; done")),
        calls(tool_call("read_file", "r1", path=path, start_line=800, end_line=801)),
        answer("done"),
    ]
    async with running_worker(client, config):
        handle = await start_run(client, config, "print a lot", model=write_script(home, script))
        view = await settle(handle)
        activities = scheduled_activities(await history_events(handle))
    assert view.status == "completed"
    assert ("tool_output.externalize", "ToolOutputBudget.wrap_tool_call · save bash output") in activities
    host_file = home / f"users/default/threads/{view.thread_id}/user-data/outputs/.tool-results" / path.rsplit("/")[-1]
    assert host_file.read_text() == output
    state = thread_state(home, view.thread_id)
    tool_messages = {m["tool_call_id"]: m for m in state["messages"] if m["type"] == "tool"}
    preview = tool_messages["b1"]["content"]
    assert preview.startswith(f"[Full bash output saved to {path} (16000 chars, ~4000 tokens).]")
    assert "000000799" not in preview  # the middle of the output is only in the file
    assert tool_messages["r1"]["content"] == "000000799\n000000800"
