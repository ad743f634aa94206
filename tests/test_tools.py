"""The ``tool.execute`` / ``sandbox.release`` activities on a real LocalSandboxProvider: DeerFlow's result
strings and limits, lazy sandbox acquisition, and which failures are results versus non-retryable errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import sandbox_tools
from activities.paths import ThreadPaths
from activities.sandbox.local import LocalSandboxProvider
from activities.sandbox.local_sandbox import LOCAL_HOST_BASH_DISABLED_MESSAGE
from activities.tools import ToolActivities
from vocabulary.contracts import SandboxReleaseInput, ThreadRef, ToolCallInput, ToolCallOutput
from vocabulary.tool_args import ReadFileArgs

WS = "/mnt/user-data/workspace"
THREAD = ThreadRef("u1", "t1")
SANDBOX_ID = "local:u1:t1"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def paths(home: Path) -> ThreadPaths:
    return ThreadPaths(home, "u1", "t1")


@pytest.fixture
def acts(home: Path) -> ToolActivities:
    return ToolActivities(LocalSandboxProvider(home, allow_host_bash=True, bash_timeout=10))


async def run(acts: ToolActivities, name: str, sandbox_id: str | None = SANDBOX_ID, **args: Any) -> ToolCallOutput:
    call = ToolCallInput(THREAD, {"name": name, "args": args, "id": "call-1"}, sandbox_id)
    output: ToolCallOutput = await ActivityEnvironment().run(acts.execute, call)
    return output


async def content(acts: ToolActivities, name: str, **args: Any) -> str:
    output = await run(acts, name, **args)
    assert output.status == "success", output.content
    return output.content


# -- lazy sandbox ----------------------------------------------------------------------------------------


async def test_first_tool_call_acquires_the_sandbox_and_reports_its_id(
    acts: ToolActivities, paths: ThreadPaths
) -> None:
    assert not paths.workspace.exists()
    output = await run(acts, "ls", None, path=WS)
    assert output == ToolCallOutput("(empty)", sandbox_id=SANDBOX_ID, sandbox_needs_release=False)
    assert paths.workspace.is_dir() and paths.outputs.is_dir() and paths.uploads.is_dir()


async def test_a_stale_or_foreign_sandbox_id_is_replaced_by_a_fresh_acquire(acts: ToolActivities) -> None:
    for stale in ("local:u1:t1", "k8s:gone", "local:u1:other-thread"):
        output = await run(acts, "ls", stale, path=WS)
        assert output.sandbox_id == SANDBOX_ID


async def test_a_new_worker_reuses_the_sandbox_id_from_thread_state(home: Path, paths: ThreadPaths) -> None:
    first = ToolActivities(LocalSandboxProvider(home))
    output = await run(first, "write_file", None, path=f"{WS}/a.txt", content="from worker 1")
    second = ToolActivities(LocalSandboxProvider(home))
    again = await run(second, "read_file", output.sandbox_id, path=f"{WS}/a.txt")
    assert again == ToolCallOutput("from worker 1", sandbox_id=SANDBOX_ID, sandbox_needs_release=False)


async def test_release_is_idempotent(acts: ToolActivities, paths: ThreadPaths) -> None:
    await run(acts, "ls", None, path=WS)
    env = ActivityEnvironment()
    for sandbox_id in (SANDBOX_ID, SANDBOX_ID, "local:u1:never"):
        await env.run(acts.release, SandboxReleaseInput(THREAD, sandbox_id))
    assert paths.workspace.is_dir()
    assert (await run(acts, "ls", SANDBOX_ID, path=WS)).sandbox_id == SANDBOX_ID


async def test_long_tool_calls_heartbeat(home: Path) -> None:
    acts = ToolActivities(LocalSandboxProvider(home, allow_host_bash=True), heartbeat_interval=0.05)
    env = ActivityEnvironment()
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    call = ToolCallInput(THREAD, {"name": "bash", "args": {"command": "sleep 0.5; echo done"}, "id": "c"})
    output = await env.run(acts.execute, call)
    assert output.content == "done\n"
    assert len(beats) >= 3


async def test_execute_works_outside_an_activity(acts: ToolActivities) -> None:
    call = ToolCallInput(THREAD, {"name": "bash", "args": {"command": "echo hi"}, "id": "c"})
    assert (await acts.execute(call)).content == "hi\n"


# -- malformed calls -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool_call", "error_type"),
    [
        ({"name": "rm_rf", "args": {}}, "UnknownTool"),
        ({"name": "ask_clarification", "args": {"question": "?"}}, "UnknownTool"),
        ({"args": {}}, "UnknownTool"),
        ({"name": "ls", "args": '{"path": "/mnt/user-data"}'}, "InvalidToolArguments"),
        ({"name": "ls", "args": None}, "InvalidToolArguments"),
        ({"name": "ls", "args": {}}, "InvalidToolArguments"),
        ({"name": "read_file", "args": {"path": WS, "start_line": "first"}}, "InvalidToolArguments"),
    ],
)
async def test_malformed_calls_fail_non_retryably_without_acquiring(
    acts: ToolActivities, paths: ThreadPaths, tool_call: dict[str, Any], error_type: str
) -> None:
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(acts.execute, ToolCallInput(THREAD, tool_call))
    assert raised.value.type == error_type
    assert raised.value.non_retryable
    assert not paths.thread_dir.exists()


async def test_invalid_arguments_are_named_in_the_error(acts: ToolActivities) -> None:
    call = ToolCallInput(THREAD, {"name": "write_file", "args": {"path": WS, "append": "maybe"}})
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(acts.execute, call)
    assert raised.value.message == (
        "Invalid arguments for tool 'write_file': content: Field required; "
        "append: Input should be a valid boolean, unable to interpret input"
    )


async def test_extra_arguments_are_ignored_and_strings_coerced(acts: ToolActivities) -> None:
    await content(acts, "write_file", path=f"{WS}/a.txt", content="1\n2\n3", description="why")
    assert await content(acts, "read_file", path=f"{WS}/a.txt", start_line="2", end_line=2) == "2"


# -- results and errors ----------------------------------------------------------------------------------


async def test_sandbox_errors_become_error_results(acts: ToolActivities) -> None:
    assert await run(acts, "read_file", path="/etc/passwd") == ToolCallOutput(
        "Error: Only paths under /mnt/user-data/ are allowed: /etc/passwd", "error", SANDBOX_ID, None, False
    )
    missing = await run(acts, "read_file", path=f"{WS}/nope.txt")
    assert (missing.content, missing.status) == (f"Error: File not found: {WS}/nope.txt", "error")
    traversal = await run(acts, "ls", path=f"{WS}/../..")
    assert traversal.content == "Error: Access denied: path traversal detected"


async def test_bash_disabled_message_is_exact(home: Path) -> None:
    acts = ToolActivities(LocalSandboxProvider(home))
    output = await run(acts, "bash", None, command="echo hi")
    assert output.content == (
        "Error: Host bash execution is disabled for LocalSandboxProvider because it is not a secure sandbox "
        "boundary. Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: "
        "true only in a fully trusted local environment."
    )
    assert output.content == f"Error: {LOCAL_HOST_BASH_DISABLED_MESSAGE}"
    assert output.status == "error"
    assert output.sandbox_id == SANDBOX_ID


async def test_a_failing_command_is_a_successful_tool_call(acts: ToolActivities) -> None:
    output = await run(acts, "bash", None, command="ls /mnt/user-data/workspace/nope")
    assert output.status == "success"
    assert output.content.startswith("ls: cannot access '/mnt/user-data/workspace/nope'")
    assert output.content.endswith("\nExit Code: 2")


async def test_bash_output_is_middle_truncated_at_20000_chars(acts: ToolActivities) -> None:
    def xs(n: int) -> str:
        return f"head -c {n} /dev/zero | tr '\\0' x"

    exact = await content(acts, "bash", command=f"printf S; {xs(19998)}; printf E")
    assert exact == "S" + "x" * 19998 + "E"

    over = await content(acts, "bash", command=f"printf S; {xs(19999)}; printf E")
    marker_len = len("\n... [middle truncated: 20001 chars skipped] ...\n")
    kept = 20000 - marker_len
    skipped = 20001 - kept
    head, tail = "S" + "x" * (kept // 2 - 1), "x" * (kept - kept // 2 - 1) + "E"
    assert over == f"{head}\n... [middle truncated: {skipped} chars skipped] ...\n{tail}"
    assert len(over) <= 20000


async def test_bash_truncation_keeps_the_exit_code(acts: ToolActivities) -> None:
    out = await content(acts, "bash", command="head -c 30000 /dev/zero | tr '\\0' x; exit 4")
    assert len(out) <= 20000
    assert "chars skipped] ...\n" in out
    assert out.endswith("x\nExit Code: 4")


async def test_read_file_is_head_truncated_at_50000_chars(acts: ToolActivities, paths: ThreadPaths) -> None:
    await run(acts, "ls", None, path=WS)
    (paths.workspace / "exact.txt").write_text("y" * 50000)
    (paths.workspace / "over.txt").write_text("y" * 50001)
    assert await content(acts, "read_file", path=f"{WS}/exact.txt") == "y" * 50000

    over = await content(acts, "read_file", path=f"{WS}/over.txt")
    hint = "Use start_line/end_line to read a specific range"
    kept = 50000 - len(f"\n... [truncated: showing first 50001 of 50001 chars. {hint}] ...")
    assert over == "y" * kept + f"\n... [truncated: showing first {kept} of 50001 chars. {hint}] ..."


async def test_ls_is_head_truncated_at_20000_chars(acts: ToolActivities, paths: ThreadPaths) -> None:
    await run(acts, "ls", None, path=WS)
    # 88 entries of len(f"{WS}/") + 200 chars, one shorter entry, 88 newlines: exactly 20000 characters.
    for i in range(88):
        (paths.workspace / (f"{i:03d}" + "a" * 197)).write_text("")
    last = paths.workspace / ("z" * (20000 - 88 * 226 - len(f"{WS}/")))
    last.write_text("")
    listing = await content(acts, "ls", path=WS)
    assert len(listing) == 20000 and "truncated" not in listing

    last.rename(paths.workspace / (last.name + "z"))
    over = await content(acts, "ls", path=WS)
    hint = "Use a more specific path to see fewer results"
    kept = 20000 - len(f"\n... [truncated: showing first 20001 of 20001 chars. {hint}] ...")
    assert over == listing[:kept] + f"\n... [truncated: showing first {kept} of 20001 chars. {hint}] ..."


async def test_read_file_ranges_and_notes(acts: ToolActivities) -> None:
    await content(acts, "write_file", path=f"{WS}/l.txt", content="a\nb\nc\n")
    await content(acts, "write_file", path=f"{WS}/empty.txt", content="")
    expectations = [
        ({"start_line": 2, "end_line": 3}, "b\nc"),
        ({"start_line": 0}, "(start_line must be >= 1)"),
        ({"end_line": 0}, "(end_line must be >= 1)"),
        ({"start_line": 3, "end_line": 2}, "(start_line > end_line — no lines in range)"),
        ({"start_line": 9}, "(start_line exceeds file length)"),
    ]
    for rng, expected in expectations:
        assert await content(acts, "read_file", path=f"{WS}/l.txt", **rng) == expected
    assert await content(acts, "read_file", path=f"{WS}/empty.txt") == "(empty)"


async def test_write_file_size_cap_applies_to_single_writes_only(acts: ToolActivities) -> None:
    assert await content(acts, "write_file", path=f"{WS}/a.txt", content="é" * 40960) == "OK"
    too_big = await run(acts, "write_file", path=f"{WS}/a.txt", content="é" * 40960 + "x")
    assert too_big.status == "error"
    assert too_big.content.startswith(
        "Error: write_file content (81921 bytes) exceeds the 81920-byte single-call limit."
    )
    assert await content(acts, "write_file", path=f"{WS}/a.txt", content="x" * 90000, append=True) == "OK"


async def test_str_replace_through_the_tool(acts: ToolActivities) -> None:
    await content(acts, "write_file", path=f"{WS}/s.py", content="x = 1\nx = 1\n")
    ambiguous = await run(acts, "str_replace", path=f"{WS}/s.py", old_str="x = 1", new_str="x = 2")
    assert ambiguous.status == "error"
    assert ambiguous.content.startswith(f"Error: String to replace occurs 2 times in file: {WS}/s.py.")
    args = {"path": f"{WS}/s.py", "old_str": "x = 1", "new_str": "x = 2", "replace_all": True}
    assert await content(acts, "str_replace", **args) == "OK"
    assert await content(acts, "read_file", path=f"{WS}/s.py") == "x = 2\nx = 2\n"


async def test_glob_results_and_limits(acts: ToolActivities, paths: ThreadPaths) -> None:
    await run(acts, "ls", None, path=WS)
    assert await content(acts, "glob", path=WS, pattern="*.md") == f"No files matched under {WS}"
    for i in range(200):
        (paths.workspace / f"f{i:04d}.md").write_text("")
    exact = await content(acts, "glob", path=WS, pattern="*.md")
    assert exact.splitlines()[0] == f"Found 200 paths under {WS}"
    assert "truncated" not in exact
    (paths.workspace / "f9999.md").write_text("")
    over = (await content(acts, "glob", path=WS, pattern="*.md")).splitlines()
    assert over[0] == f"Found 200 paths under {WS} (showing first 200)"
    assert over[1].startswith(f"1. {WS}/f") and over[200].startswith(f"200. {WS}/f")
    assert over[-1] == "Results truncated. Narrow the path or pattern to see fewer matches."
    assert len(over) == 202

    assert len((await content(acts, "glob", path=WS, pattern="*.md", max_results=5)).splitlines()) == 7
    for i in range(200, 1000):
        (paths.workspace / f"f{i:04d}.md").write_text("")
    clamped = await content(acts, "glob", path=WS, pattern="*.md", max_results=5000)
    assert clamped.splitlines()[0] == f"Found 1000 paths under {WS} (showing first 1000)"


async def test_grep_results_and_limits(acts: ToolActivities, paths: ThreadPaths) -> None:
    await run(acts, "ls", None, path=WS)
    assert await content(acts, "grep", path=WS, pattern="hit") == f"No matches found under {WS}"
    (paths.workspace / "a.txt").write_text("hit\n" * 100)
    exact = (await content(acts, "grep", path=WS, pattern="HIT")).splitlines()
    assert exact[0] == f"Found 100 matches under {WS}"
    assert exact[1] == f"{WS}/a.txt:1: hit"
    assert len(exact) == 101
    (paths.workspace / "a.txt").write_text("hit\n" * 600)
    over = (await content(acts, "grep", path=WS, pattern="hit")).splitlines()
    assert over[0] == f"Found 100 matches under {WS} (showing first 100)"
    assert over[-1] == "Results truncated. Narrow the path or add a glob filter."
    clamped = await content(acts, "grep", path=WS, pattern="hit", max_results=10_000)
    assert clamped.splitlines()[0] == f"Found 500 matches under {WS} (showing first 500)"
    none = await content(acts, "grep", path=WS, pattern="hit", glob="*.py")
    assert none == f"No matches found under {WS}"


def test_tool_functions_run_without_temporal(home: Path) -> None:
    provider = LocalSandboxProvider(home)
    sandbox = provider.get(provider.acquire("u1", "t1"))
    assert sandbox is not None
    sandbox.write_file(f"{WS}/a.txt", "")
    assert sandbox_tools.read_file(sandbox, ReadFileArgs(path=f"{WS}/a.txt")) == "(empty)"
