"""The sandbox server as a real local process (stdlib only, like the image), driven over HTTP by RemoteSandbox."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from activities import sandbox_tools
from activities.paths import ThreadPaths
from activities.sandbox import Sandbox, SandboxError
from activities.sandbox.local import LocalSandboxProvider
from activities.sandbox.pod_files import PodWorkingCopy
from activities.sandbox.remote import (
    MAX_COMMAND_CHARS,
    SYNC_CHUNK_BYTES,
    TOKEN_ENV,
    RemoteSandbox,
    SandboxUnavailableError,
)
from activities.user_data_tree import PathEscapeError
from tests.support.kube import REPO

TOKEN = "s3cret-token-for-tests"
WS = "/mnt/user-data/workspace"


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    root: Path

    def client(self, token: str = TOKEN, timeout: float = 30) -> RemoteSandbox:
        return RemoteSandbox(self.url, token, default_timeout=timeout)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(10)


def start_server(root: Path, *args: str, token: str | None = TOKEN) -> Server:
    # -S and a bare PYTHONPATH: no site-packages, exactly what the sandbox image provides.
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}
    if token is not None:
        env[TOKEN_ENV] = token
    command = [sys.executable, "-S", "-m", "workers.sandbox_server", "--host", "127.0.0.1", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--root", str(root), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    return Server(process, line.rsplit(" ", 1)[-1], root)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = start_server(tmp_path_factory.mktemp("pod") / "user-data")
    assert started.url.startswith("http://127.0.0.1:"), started.process.stderr
    yield started
    started.stop()


@pytest.fixture
def remote(server: Server) -> RemoteSandbox:
    return server.client()


def _raw(server: Server, method: str, path: str, body: bytes | None = None, token: str = TOKEN) -> tuple[int, dict]:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=body, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


# -- serving ---------------------------------------------------------------------------------------------------


def test_health_needs_no_token_and_the_root_has_the_three_folders(server: Server) -> None:
    status, payload = _raw(server, "GET", "/healthz", token="")
    assert (status, payload["status"]) == (200, "ok")
    assert sorted(p.name for p in server.root.iterdir()) == ["outputs", "uploads", "workspace"]


def test_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    started = start_server(tmp_path / "root", token=None)
    assert started.process.wait(10) == 2
    assert started.process.stderr is not None
    assert f"${TOKEN_ENV} is not set" in started.process.stderr.read()


def test_sigterm_stops_the_server_cleanly(tmp_path: Path) -> None:
    started = start_server(tmp_path / "root")
    assert started.client().healthy()
    assert started.stop() == 0


# -- authentication and limits ----------------------------------------------------------------------------------


def test_a_wrong_token_is_refused_and_nothing_runs(server: Server) -> None:
    intruder = server.client(token="guess")
    with pytest.raises(SandboxUnavailableError, match="rejected the token"):
        intruder.execute_command("touch /mnt/user-data/workspace/pwned")
    with pytest.raises(SandboxUnavailableError):
        intruder.read_file(f"{WS}/anything")
    assert _raw(server, "POST", "/v1/sandbox/list_dir", b'{"path": "/mnt/user-data"}', token="")[0] == 401
    assert not (server.root / "workspace" / "pwned").exists()


def test_an_over_long_command_is_refused_before_it_runs(remote: RemoteSandbox, server: Server) -> None:
    command = "touch /mnt/user-data/workspace/ran #" + "x" * MAX_COMMAND_CHARS
    with pytest.raises(SandboxError, match=f"command too long: {len(command)} characters, the limit is 10000"):
        remote.execute_command(command)
    assert not (server.root / "workspace" / "ran").exists()
    assert "ok" in remote.execute_command("echo ok #" + "x" * (MAX_COMMAND_CHARS - 10))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.read_file("/etc/passwd"), "Only paths under /mnt/user-data/ are allowed: /etc/passwd"),
        (lambda s: s.write_file("/tmp/x", "x"), "Only paths under /mnt/user-data/ are allowed: /tmp/x"),
        (lambda s: s.read_file(f"{WS}/../../../etc/passwd"), "Access denied: path traversal detected"),
        (lambda s: s.list_dir("/"), "Only paths under /mnt/user-data/ are allowed: /"),
        (lambda s: s.glob("/etc", "*"), "Only paths under /mnt/user-data/ are allowed: /etc"),
        (lambda s: s.grep("/mnt/user-data/../", "root"), "Access denied: path traversal detected"),
    ],
)
def test_paths_outside_user_data_are_refused(remote: RemoteSandbox, call: object, message: str) -> None:
    with pytest.raises(SandboxError) as error:
        call(remote)  # type: ignore[operator]
    assert str(error.value) == message


def test_a_symlink_out_of_user_data_is_refused(remote: RemoteSandbox) -> None:
    remote.execute_command(f"ln -sf /etc/hostname {WS}/escape")
    with pytest.raises(SandboxError, match="Access denied: path traversal detected"):
        remote.read_file(f"{WS}/escape")


def test_timeout_and_output_cap(tmp_path: Path) -> None:
    started = start_server(tmp_path / "root", "--bash-timeout", "1", "--max-output-bytes", "1000")
    try:
        remote = started.client()
        # The server's timeout is a ceiling: asking for more does not buy more.
        report = remote.execute_command("echo started; sleep 30", timeout=600)
        assert report.startswith("started\n\nCommand timed out after 1 second and was terminated.")
        assert report.endswith("\nExit Code: 124")
        capped = remote.execute_command("head -c 5000 /dev/zero | tr '\\0' a")
        assert (
            capped == "a" * 1000 + "\n... [output truncated after 1000 of 5000 bytes; remaining output discarded] ..."
        )
    finally:
        started.stop()


def test_the_token_never_reaches_commands(remote: RemoteSandbox) -> None:
    assert remote.execute_command(f'echo "[${TOKEN_ENV}]"; env | grep -c {TOKEN} || true') == "[]\n0\n"


def test_protocol_errors_are_not_sandbox_errors(server: Server) -> None:
    assert _raw(server, "POST", "/v1/sandbox/read_file", b"[1, 2]")[0] == 400
    assert _raw(server, "POST", "/v1/sandbox/read_file", b'{"path": "/mnt/user-data", "bogus": 1}')[0] == 400
    assert _raw(server, "POST", "/v1/sandbox/delete_everything", b"{}")[0] == 404
    with pytest.raises(SandboxUnavailableError, match="unreachable"):
        RemoteSandbox("http://127.0.0.1:9", TOKEN, default_timeout=5).read_file(f"{WS}/x")


# -- same behaviour as the local provider --------------------------------------------------------------------


def _session(sandbox: Sandbox) -> list[str]:
    """A tool session through activities/tools.py, as the tool activity runs it."""
    calls: list[tuple[str, dict[str, object]]] = [
        ("write_file", {"path": f"{WS}/notes.md", "content": "alpha\nBeta\r\ngamma\n"}),
        ("write_file", {"path": f"{WS}/notes.md", "content": "delta\n", "append": True}),
        ("write_file", {"path": f"{WS}/src/app.py", "content": "import os\nprint('beta')\n"}),
        ("read_file", {"path": f"{WS}/notes.md"}),
        ("read_file", {"path": f"{WS}/notes.md", "start_line": 2, "end_line": 3}),
        ("str_replace", {"path": f"{WS}/notes.md", "old_str": "gamma", "new_str": "GAMMA"}),
        ("str_replace", {"path": f"{WS}/notes.md", "old_str": "nope", "new_str": "x"}),
        ("ls", {"path": "/mnt/user-data"}),
        ("glob", {"path": "/mnt/user-data", "pattern": "**/*.py"}),
        ("grep", {"path": WS, "pattern": "beta"}),
        ("grep", {"path": WS, "pattern": "(", "literal": False}),
        ("bash", {"command": "cat notes.md; echo oops >&2; exit 3"}),
        ("bash", {"command": "cd /mnt/user-data/outputs && pwd && ls .."}),
        ("read_file", {"path": f"{WS}/missing.txt"}),
    ]
    results = []
    for name, args in calls:
        try:
            results.append(sandbox_tools.TOOLS[name].bind(args)(sandbox))
        except SandboxError as e:
            results.append(f"Error: {e}")
    return results


def test_tools_answer_exactly_as_with_the_local_provider(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path / "home", allow_host_bash=True, bash_timeout=30)
    local = provider.get(provider.acquire("u1", "t1"))
    assert local is not None
    started = start_server(tmp_path / "pod")
    try:
        remote_results = _session(started.client())
    finally:
        started.stop()
    local_results = _session(local)
    assert remote_results == local_results
    assert remote_results[5] == "OK"
    assert remote_results[11] == "alpha\nBeta\r\nGAMMA\ndelta\n\nStd Error:\noops\n\nExit Code: 3"
    assert ThreadPaths(tmp_path / "home", "u1", "t1").workspace.joinpath("notes.md").is_file()


# -- /v1/files: the worker's file sync ---------------------------------------------------------------------------


def test_file_sync_round_trip_in_chunks(remote: RemoteSandbox, server: Server) -> None:
    copy = PodWorkingCopy(remote, chunk_bytes=1000)  # small chunks: several requests per file
    data = os.urandom(3500)
    written = copy.write("outputs/sync/blob.bin", data)
    assert (server.root / "outputs/sync/blob.bin").read_bytes() == data
    assert copy.files(frozenset())["outputs/sync/blob.bin"] == written
    assert copy.read("outputs/sync/blob.bin") == data
    assert copy.read("outputs/sync/missing.bin") is None
    assert not copy.delete_if_unchanged("outputs/sync/blob.bin", (written[0] - 1, written[1]))  # changed since
    assert copy.delete_if_unchanged("outputs/sync/blob.bin", written)
    assert not (server.root / "outputs/sync/blob.bin").exists()
    copy.save_manifest(b'{"files": {}}')
    assert copy.load_manifest() == b'{"files": {}}'


def test_file_sync_is_confined_like_the_tools(remote: RemoteSandbox, server: Server, tmp_path: Path) -> None:
    copy = PodWorkingCopy(remote)
    (tmp_path / "secret.txt").write_text("host secret")
    (server.root / "workspace/out").symlink_to(tmp_path)
    (server.root / "workspace/leak.txt").symlink_to(tmp_path / "secret.txt")
    for relative in ["../etc/passwd", "workspace/../../x", "notes.txt", "workspace/out/secret.txt"]:
        with pytest.raises(PathEscapeError):
            copy.write(relative, b"x")
        with pytest.raises(PathEscapeError):
            copy.read(relative)
    with pytest.raises(PathEscapeError):
        copy.read("workspace/leak.txt")  # a symlink is never followed, also when asked for by name
    listed = copy.files(frozenset())
    assert not any(name.startswith(("workspace/out", "workspace/leak")) for name in listed)
    assert (tmp_path / "secret.txt").read_text() == "host secret"


def test_file_sync_never_follows_a_linked_top_level_folder(tmp_path: Path) -> None:
    """``ln -s /somewhere /mnt/user-data/outputs`` in the pod: the sync neither lists, reads, writes nor deletes
    there (issue 24), and the file tools refuse it too."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("pod secret")
    root = tmp_path / "pod"
    for name in ("workspace", "uploads"):
        (root / name).mkdir(parents=True)
    (root / "outputs").symlink_to(outside)
    server = start_server(root)
    try:
        copy = PodWorkingCopy(server.client())
        assert not any(name.startswith("outputs/") for name in copy.files(frozenset()))
        with pytest.raises(PathEscapeError, match="symbolic link"):
            copy.read("outputs/secret.txt")
        with pytest.raises(PathEscapeError, match="symbolic link"):
            copy.write("outputs/planted.txt", b"x")
        stat = (outside / "secret.txt").stat()
        with pytest.raises(PathEscapeError, match="symbolic link"):
            copy.delete_if_unchanged("outputs/secret.txt", (stat.st_mtime_ns, stat.st_size))
        with pytest.raises(SandboxError, match="Access denied"):
            server.client().read_file("/mnt/user-data/outputs/secret.txt")
    finally:
        server.stop()
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "pod secret"


def test_file_sync_needs_the_token_and_refuses_oversized_or_broken_transfers(server: Server) -> None:
    assert _raw(server, "POST", "/v1/files/list", b"{}", token="wrong")[0] == 401
    # Refused on the declared length, before the body is read (so none is sent here).
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.putrequest("POST", "/v1/files/write?path=outputs/a&transfer=" + "0" * 32 + "&offset=0")
    connection.putheader("Authorization", f"Bearer {TOKEN}")
    connection.putheader("Content-Length", str(SYNC_CHUNK_BYTES + 8192))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and "chunk" in json.loads(response.read())["error"]
    connection.close()
    # A chunk that does not continue its transfer, and a transfer id that is not one.
    assert _raw(server, "POST", "/v1/files/write?path=outputs/a&transfer=" + "1" * 32 + "&offset=5", b"x")[0] == 422
    assert _raw(server, "POST", "/v1/files/write?path=outputs/a&transfer=../x&offset=0", b"x")[0] == 422
    assert _raw(server, "POST", "/v1/files/write?path=outputs/a", b"x")[0] == 400
    assert _raw(server, "POST", "/v1/files/unknown", b"{}")[0] == 404
    assert not (server.root / "outputs/a").exists()
