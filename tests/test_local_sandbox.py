"""LocalSandboxProvider on real directories and real bash subprocesses: ids, confinement, file ops, bash."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from activities.paths import ThreadPaths
from activities.sandbox import Sandbox, SandboxError
from activities.sandbox.local import LocalSandboxProvider
from activities.sandbox.local_sandbox import LOCAL_HOST_BASH_DISABLED_MESSAGE
from tests.support.faults import process_alive

WS = "/mnt/user-data/workspace"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def paths(home: Path) -> ThreadPaths:
    return ThreadPaths(home, "u1", "t1")


def _sandbox(home: Path, **options: bool | float) -> Sandbox:
    provider = LocalSandboxProvider(home, **options)  # type: ignore[arg-type]
    sandbox = provider.get(provider.acquire("u1", "t1"))
    assert sandbox is not None
    return sandbox


@pytest.fixture
def sandbox(home: Path) -> Sandbox:
    return _sandbox(home)


@pytest.fixture
def shell(home: Path) -> Sandbox:
    return _sandbox(home, allow_host_bash=True, bash_timeout=10)


# -- provider --------------------------------------------------------------------------------------------


def test_acquire_creates_thread_dirs_and_is_idempotent(home: Path, paths: ThreadPaths) -> None:
    provider = LocalSandboxProvider(home)
    assert provider.acquire("u1", "t1") == "local:u1:t1"
    for d in (paths.workspace, paths.uploads, paths.outputs):
        assert d.is_dir()
    (paths.workspace / "keep.txt").write_text("x")
    assert provider.acquire("u1", "t1") == "local:u1:t1"
    assert (paths.workspace / "keep.txt").read_text() == "x"
    assert provider.uses_thread_data_mounts is True


def test_acquire_rejects_ids_that_are_not_safe_path_segments(home: Path) -> None:
    provider = LocalSandboxProvider(home)
    for user, thread in [("../u", "t1"), ("u1", "a/b"), ("u1", ""), ("u:1", "t1")]:
        with pytest.raises(SandboxError):
            provider.acquire(user, thread)
    assert not home.exists()


def test_a_second_provider_can_get_a_sandbox_acquired_by_the_first(home: Path) -> None:
    sandbox_id = LocalSandboxProvider(home).acquire("u1", "t1")
    other = LocalSandboxProvider(home)
    sandbox = other.get(sandbox_id)
    assert sandbox is not None
    sandbox.write_file(f"{WS}/a.txt", "hi")
    assert (home / "users/u1/threads/t1/user-data/workspace/a.txt").read_text() == "hi"


@pytest.mark.parametrize(
    "sandbox_id", ["local:u1:t2", "local:u1", "local:u1:t1:x", "local:..:t1", "k8s:u1:t1", "", "local::"]
)
def test_get_returns_none_for_unknown_or_malformed_ids(home: Path, sandbox_id: str) -> None:
    provider = LocalSandboxProvider(home)
    provider.acquire("u1", "t1")
    assert provider.get(sandbox_id) is None


def test_release_is_idempotent_and_only_forgets_the_cache(home: Path, paths: ThreadPaths) -> None:
    provider = LocalSandboxProvider(home)
    sandbox_id = provider.acquire("u1", "t1")
    provider.release(sandbox_id)
    provider.release(sandbox_id)
    provider.release("local:never:acquired")
    assert paths.workspace.is_dir()
    assert provider.get(sandbox_id) is not None


# -- path confinement ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "Only paths under /mnt/user-data/ are allowed"),
        ("workspace/a.txt", "Only paths under /mnt/user-data/ are allowed"),
        ("/mnt/user-database/a.txt", "Only paths under /mnt/user-data/ are allowed"),
        ("/mnt/user-data/secrets/a.txt", "Only paths under /mnt/user-data/workspace"),
        ("/mnt/user-data/workspace/../../../state.json", "Access denied: path traversal detected"),
        ("/mnt/user-data/workspace/x/../../outputs/a.txt", "Access denied: path traversal detected"),
    ],
)
def test_paths_outside_the_thread_dirs_are_rejected(sandbox: Sandbox, path: str, message: str) -> None:
    with pytest.raises(SandboxError, match=message.replace(".", r"\.")):
        sandbox.read_file(path)
    with pytest.raises(SandboxError, match=message.replace(".", r"\.")):
        sandbox.write_file(path, "x")


def test_symlink_escape_is_rejected(sandbox: Sandbox, paths: ThreadPaths, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (paths.workspace / "link").symlink_to(outside)
    (paths.workspace / "file-link").symlink_to(outside / "secret.txt")
    ops: list[Callable[[], object]] = [
        lambda: sandbox.read_file(f"{WS}/link/secret.txt"),
        lambda: sandbox.read_file(f"{WS}/file-link"),
        lambda: sandbox.write_file(f"{WS}/link/new.txt", "x"),
        lambda: sandbox.list_dir(f"{WS}/link"),
        lambda: sandbox.grep(f"{WS}/file-link", "secret"),
    ]
    for op in ops:
        with pytest.raises(SandboxError, match="path traversal detected"):
            op()
    assert not (outside / "new.txt").exists()
    assert f"{WS}/link/" not in sandbox.list_dir(WS)
    assert sandbox.grep(WS, "secret") == []


def test_symlink_between_thread_dirs_is_allowed(sandbox: Sandbox, paths: ThreadPaths) -> None:
    (paths.outputs / "report.md").write_text("done")
    (paths.workspace / "report.md").symlink_to(paths.outputs / "report.md")
    assert sandbox.read_file(f"{WS}/report.md") == "done"


def test_user_data_root_is_listable_but_not_writable(sandbox: Sandbox) -> None:
    assert sandbox.list_dir("/mnt/user-data") == [
        "/mnt/user-data/outputs/",
        "/mnt/user-data/uploads/",
        "/mnt/user-data/workspace/",
    ]
    with pytest.raises(SandboxError, match="Only paths under"):
        sandbox.write_file("/mnt/user-data/a.txt", "x")


# -- files -----------------------------------------------------------------------------------------------


def test_write_read_append_and_parent_creation(sandbox: Sandbox, paths: ThreadPaths) -> None:
    sandbox.write_file("/mnt/user-data/outputs/deep/er/a.txt", "one\r\ntwo\n")
    assert (paths.outputs / "deep/er/a.txt").read_bytes() == b"one\r\ntwo\n"
    assert sandbox.read_file("/mnt/user-data/outputs/deep/er/a.txt") == "one\r\ntwo\n"
    sandbox.write_file("/mnt/user-data/outputs/deep/er/a.txt", "three", append=True)
    assert sandbox.read_file("/mnt/user-data/outputs/deep/er/a.txt") == "one\r\ntwo\nthree"
    sandbox.write_file("/mnt/user-data/outputs/deep/er/a.txt", "new")
    assert sandbox.read_file("/mnt/user-data/outputs/deep/er/a.txt") == "new"


def test_read_file_line_ranges(sandbox: Sandbox) -> None:
    sandbox.write_file(f"{WS}/l.txt", "1\n2\r\n3\n4\n5")
    assert sandbox.read_file(f"{WS}/l.txt", 2, 3) == "2\n3"
    assert sandbox.read_file(f"{WS}/l.txt", start_line=4) == "4\n5"
    assert sandbox.read_file(f"{WS}/l.txt", end_line=1) == "1"
    assert sandbox.read_file(f"{WS}/l.txt", 5, 5) == "5"
    assert sandbox.read_file(f"{WS}/l.txt", 6, 9) == ""


def test_file_errors_name_the_virtual_path_only(sandbox: Sandbox, paths: ThreadPaths) -> None:
    (paths.workspace / "bin.dat").write_bytes(b"\xff\xfe\x00\x01")
    (paths.workspace / "plain").write_text("x")
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: sandbox.read_file(f"{WS}/missing.txt"), f"File not found: {WS}/missing.txt"),
        (lambda: sandbox.read_file(WS), f"Path is a directory, not a file: {WS}"),
        (lambda: sandbox.read_file(f"{WS}/bin.dat"), "appears to be a binary file"),
        (lambda: sandbox.write_file(WS, "x"), f"Path is a directory, not a file: {WS}"),
        (lambda: sandbox.write_file(f"{WS}/plain/x", "x"), f"Path is not a directory: {WS}/plain/x"),
        (lambda: sandbox.list_dir(f"{WS}/nope"), f"Directory not found: {WS}/nope"),
        (lambda: sandbox.glob(f"{WS}/plain", "*"), f"Path is not a directory: {WS}/plain"),
        (lambda: sandbox.grep(f"{WS}/nope", "x"), f"Directory not found: {WS}/nope"),
        (lambda: sandbox.grep(WS, "("), "Invalid regex pattern"),
    ]
    for op, message in cases:
        with pytest.raises(SandboxError) as raised:
            op()
        assert message in str(raised.value)
        assert str(paths.home) not in str(raised.value)


def test_str_replace_requires_a_unique_match_unless_replace_all(sandbox: Sandbox) -> None:
    path = f"{WS}/s.txt"
    sandbox.write_file(path, "a b a\r\nc")
    with pytest.raises(SandboxError, match="occurs 2 times"):
        sandbox.str_replace(path, "a", "x")
    with pytest.raises(SandboxError, match=f"String to replace not found in file: {path}"):
        sandbox.str_replace(path, "zzz", "x")
    assert sandbox.str_replace(path, "b", "B") == "OK"
    assert sandbox.str_replace(path, "", "x") == "OK"
    assert sandbox.read_file(path) == "a B a\r\nc"
    assert sandbox.str_replace(path, "a", "x", replace_all=True) == "OK"
    assert sandbox.read_file(path) == "x B x\r\nc"
    with pytest.raises(SandboxError, match="File not found"):
        sandbox.str_replace(f"{WS}/missing", "a", "b")


# -- listing and search ----------------------------------------------------------------------------------


def test_list_dir_two_levels_sorted_with_ignores(sandbox: Sandbox, paths: ThreadPaths) -> None:
    (paths.workspace / "src/pkg/deep").mkdir(parents=True)
    (paths.workspace / "src/pkg/deep/hidden.py").write_text("")
    (paths.workspace / "src/main.py").write_text("")
    (paths.workspace / "node_modules/x").mkdir(parents=True)
    (paths.workspace / "debug.log").write_text("")
    (paths.workspace / "b.txt").write_text("")
    assert sandbox.list_dir(WS) == [
        f"{WS}/b.txt",
        f"{WS}/src/",
        f"{WS}/src/main.py",
        f"{WS}/src/pkg/",
    ]
    assert f"{WS}/src/pkg/deep/" in sandbox.list_dir(WS, max_depth=3)
    assert sandbox.list_dir("/mnt/user-data/uploads") == []


def test_glob_patterns_limits_and_dirs(sandbox: Sandbox, paths: ThreadPaths) -> None:
    (paths.workspace / "src/sub").mkdir(parents=True)
    for rel in ("top.py", "src/a.py", "src/sub/b.py", "src/c.txt", "node_modules/skip.py"):
        (paths.workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (paths.workspace / rel).write_text("")
    assert sorted(sandbox.glob(WS, "*.py")) == [f"{WS}/src/a.py", f"{WS}/src/sub/b.py", f"{WS}/top.py"]
    assert sorted(sandbox.glob(WS, "src/**/*.py")) == [f"{WS}/src/a.py", f"{WS}/src/sub/b.py"]
    assert sandbox.glob(WS, "src/*.py") == [f"{WS}/src/a.py"]
    assert len(sandbox.glob(WS, "*.py", max_results=2)) == 2
    assert sandbox.glob(WS, "su*") == []
    assert sandbox.glob(WS, "su*", include_dirs=True) == [f"{WS}/src/sub"]
    assert sandbox.glob("/mnt/user-data", "workspace/top.py") == [f"{WS}/top.py"]


def test_grep_matching_rules(sandbox: Sandbox, paths: ThreadPaths) -> None:
    (paths.workspace / "a.py").write_text("Hello world\nhello again\nnothing\n")
    (paths.workspace / "b.txt").write_text("HELLO txt\nliteral a.b here\n")
    (paths.workspace / "bin.dat").write_bytes(b"hello\x00binary")
    (paths.workspace / "long.txt").write_text("hello " + "x" * 500 + "\n")
    hits = sandbox.grep(WS, "hello")
    assert {(m.path, m.line_number) for m in hits} == {
        (f"{WS}/a.py", 1),
        (f"{WS}/a.py", 2),
        (f"{WS}/b.txt", 1),
        (f"{WS}/long.txt", 1),
    }
    long_line = next(m.line for m in hits if m.path.endswith("long.txt"))
    assert len(long_line) == 200 and long_line.endswith("...")
    assert [m.line for m in sandbox.grep(WS, "hello", case_sensitive=True, glob="*.py")] == ["hello again"]
    assert [m.line for m in sandbox.grep(WS, "a.b", literal=True)] == ["literal a.b here"]
    assert [m.line_number for m in sandbox.grep(f"{WS}/a.py", "o")] == [1, 2, 3]
    assert len(sandbox.grep(WS, "e", max_results=2)) == 2


# -- bash ------------------------------------------------------------------------------------------------


def test_bash_is_disabled_by_default_with_deerflows_message(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxError) as raised:
        sandbox.execute_command("echo hi")
    assert str(raised.value) == (
        "Host bash execution is disabled for LocalSandboxProvider because it is not a secure sandbox "
        "boundary. Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: "
        "true only in a fully trusted local environment."
    )
    assert str(raised.value) == LOCAL_HOST_BASH_DISABLED_MESSAGE


def test_bash_runs_in_the_workspace_with_virtual_paths_both_ways(shell: Sandbox, paths: ThreadPaths) -> None:
    out = shell.execute_command(
        "pwd; echo made > /mnt/user-data/outputs/r.txt; cat '/mnt/user-data/outputs/r.txt'; "
        "ls /mnt/user-data; realpath /mnt/user-data/uploads"
    )
    assert out == ("/mnt/user-data/workspace\nmade\noutputs\nuploads\nworkspace\n/mnt/user-data/uploads\n")
    assert (paths.outputs / "r.txt").read_text() == "made\n"
    assert str(paths.home) not in shell.execute_command("env; echo $PWD")


def test_bash_reports_stderr_and_exit_code(shell: Sandbox) -> None:
    assert shell.execute_command("echo out; echo err >&2; exit 3") == "out\n\nStd Error:\nerr\n\nExit Code: 3"
    assert shell.execute_command("echo err >&2") == "err\n"
    assert shell.execute_command("true") == "(no output)"
    assert shell.execute_command("exit 7") == "\nExit Code: 7"


def test_bash_timeout_kills_the_whole_process_group(shell: Sandbox, paths: ThreadPaths) -> None:
    started = time.monotonic()
    out = shell.execute_command("sleep 60 & echo $! > child.pid; echo started; sleep 60", timeout=0.5)
    assert time.monotonic() - started < 5
    assert out.startswith("started\n\nCommand timed out after 0.5 seconds and was terminated.")
    assert out.endswith("\nExit Code: 124")
    child = int((paths.workspace / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child)


def test_bash_does_not_wait_for_backgrounded_processes(shell: Sandbox) -> None:
    started = time.monotonic()
    assert shell.execute_command("sleep 3 & echo launched") == "launched\n"
    assert time.monotonic() - started < 2.5


def test_bash_environment_drops_secret_looking_variables(shell: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_API_KEY", "HF_CLIENT_SECRET", "HF_Token", "HF_DB_PASSWORD"):
        monkeypatch.setenv(name, "hunter2")
    monkeypatch.setenv("HF_HARMLESS", "visible")
    out = shell.execute_command("env")
    assert "HF_HARMLESS=visible" in out
    assert "hunter2" not in out


def test_bash_default_timeout_comes_from_the_provider(home: Path) -> None:
    sandbox = _sandbox(home, allow_host_bash=True, bash_timeout=0.3)
    assert "Command timed out after 0.3 seconds" in sandbox.execute_command("sleep 5")


def test_bash_recreates_a_deleted_workspace(shell: Sandbox, paths: ThreadPaths) -> None:
    shell.execute_command("rm -rf /mnt/user-data/workspace")
    assert not paths.workspace.exists()
    assert shell.execute_command("pwd") == "/mnt/user-data/workspace\n"
