"""DeerFlow's app and a thread's files (issue 26, row 4 and 5): the upload limits it reads, the files a message
carries reaching the run, and ``present_files`` surfacing what a run wrote, through a real server, worker, Temporal
and storage, with the requests the app sends. Bob (bearer auth) gets 404 for alice's thread."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from activities.thread_store import ObjectThreadStore
from tests.support import worker_and_api
from tests.support.tenants import as_user, bearer_api
from vocabulary.contracts import ThreadRef
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, calls, make_config, tool_call, unique, write_script
from workflows.run.present_files import NotPresentableError, presented_path

REPORT = "/mnt/user-data/outputs/report.md"


@pytest.fixture
def api_config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    uploads = {"max_files": 2, "max_file_size": 1000, "max_total_size": 1500}
    model = write_script(tmp_path, [answer("noted")])
    return make_config(home, temporal_address, model=model, api=bearer_api(tmp_path, uploads=uploads))


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


def human(text: str, files: Any = None) -> dict[str, Any]:
    """The human message DeerFlow's app submits (``frontend/src/core/threads/hooks.ts``,
    ``buildThreadSubmitMessages``): text blocks, and the uploaded files in ``additional_kwargs.files``."""
    kwargs = {} if files is None else {"files": files}
    return {"type": "human", "content": [{"type": "text", "text": text}], "additional_kwargs": kwargs}


async def run_wait(http: httpx.AsyncClient, thread_id: str, message: dict[str, Any], **extra: Any) -> httpx.Response:
    body = {"assistant_id": "lead_agent", "input": {"messages": [message]}, **extra}
    return await http.post(f"/api/threads/{thread_id}/runs/wait", json=body)


async def test_upload_limits_are_the_apps_shape_and_uploads_over_them_are_refused(url: str) -> None:
    """``frontend/src/core/uploads/api.ts`` (``getUploadLimits``) asks for a new chat's thread id before its first
    upload; ``file-validation.ts`` reads ``max_files``, ``max_file_size``, ``max_total_size``."""
    thread_id = unique("t")
    async with as_user(url, "alice") as alice:
        limits = await alice.get(f"/api/threads/{thread_id}/uploads/limits")
        assert limits.status_code == 200, limits.text
        assert limits.json() == {"max_files": 2, "max_file_size": 1000, "max_total_size": 1500}
        assert (await alice.get(f"/threads/{thread_id}/uploads/limits")).json() == limits.json()
        assert (await alice.get("/api/threads/bad..id/uploads/limits")).status_code == 422

        too_many = [("files", (f"f{i}.txt", b"x")) for i in range(3)]
        too_big = [("files", ("big.txt", b"x" * 1001))]
        too_much = [("files", ("a.txt", b"x" * 800)), ("files", ("b.txt", b"x" * 800))]
        for files, detail in (
            (too_many, "Too many files: maximum is 2"),
            (too_big, "File too large: big.txt"),
            (too_much, "Total upload size too large"),
        ):
            refused = await alice.post(f"/api/threads/{thread_id}/uploads", files=files)
            assert (refused.status_code, refused.json()["detail"]) == (413, detail)
        listed = await alice.get(f"/api/threads/{thread_id}/uploads/list")
        assert listed.status_code == 404, "a refused upload stores nothing: the thread id is still unused"


async def test_a_messages_files_reach_the_run_and_stay_on_the_message(url: str, api_config: HartflowConfig) -> None:
    """``frontend/src/core/threads/hooks.ts`` (``useThreadStream`` submit): upload, then submit the message with
    ``files: [{filename, size, path: virtual_path, status: "uploaded"}]``; the file card reads them back from the
    message, and the Uploads middleware tells the model (``<current_uploads>``), as ``hartflow run --file`` does."""
    thread_id = unique("t")
    async with as_user(url, "alice") as alice:
        uploaded = await alice.post(f"/api/threads/{thread_id}/uploads", files=[("files", ("notes.txt", b"hello"))])
        info = uploaded.json()["files"][0]
        assert (await alice.post("/api/threads", json={"thread_id": thread_id})).status_code == 200
        sent = [{"filename": info["filename"], "size": 999, "path": info["virtual_path"], "status": "uploaded"}]
        done = await run_wait(alice, thread_id, human("summarise it", sent))
        assert done.status_code == 200, done.text

        state = (await alice.get(f"/api/threads/{thread_id}/state")).json()["values"]
        [user_message] = [m for m in state["messages"] if m["type"] == "human" and m["additional_kwargs"].get("files")]
        card = {"filename": "notes.txt", "size": 5, "path": "/mnt/user-data/uploads/notes.txt", "status": "uploaded"}
        assert user_message["additional_kwargs"]["files"] == [card], "sizes come from storage, not the request"
        assert user_message["content"] == "summarise it", "clients are served what the user typed"
        committed = ObjectThreadStore(open_object_store(api_config)).load(ThreadRef("alice", thread_id)).state
        [told] = [m for m in committed.messages if m.type == "human" and m.additional_kwargs.get("files")]
        assert "<current_uploads>" in str(told.content) and card["path"] in str(told.content), "the model is told"
        assert [f["filename"] for f in state["uploaded_files"]] == ["notes.txt"]

        page = (await alice.get(f"/api/threads/{thread_id}/messages/page")).json()
        [row] = [r for r in page["data"] if r["content"]["type"] == "human"]
        assert row["content"]["content"] == "summarise it", "the history shows what the user typed"
        assert row["content"]["additional_kwargs"]["files"] == [card]


@pytest.mark.parametrize(
    ("files", "detail"),
    [
        ([{"filename": "missing.txt", "size": 1}], "'missing.txt' is not an upload of thread"),
        ([{"filename": "../../etc/passwd"}], "files[0]: invalid upload name"),
        (["/mnt/user-data/uploads/notes.txt"], "files[0]: invalid upload name"),
        ([{"size": 3}], "files[0]: a file entry needs a filename"),
        ("notes.txt", "additional_kwargs.files must be a list"),
    ],
)
async def test_a_message_naming_files_that_are_no_uploads_is_refused_before_anything_is_written(
    url: str, files: Any, detail: str
) -> None:
    thread_id = unique("t")
    async with as_user(url, "alice") as alice:
        refused = await run_wait(alice, thread_id, human("look", files), if_not_exists="create")
        assert refused.status_code == 422 and detail in refused.json()["detail"], refused.text
        assert (await alice.get(f"/api/threads/{thread_id}")).status_code == 404, "no thread was created"


async def test_present_files_lists_what_bash_wrote_and_the_artifacts_route_serves_it(url: str, tmp_path: Path) -> None:
    """A model writes a file with ``bash`` and presents it: the thread's ``artifacts`` (the app's artifacts panel,
    ``frontend/src/core/threads/types.ts``) lists it and ``GET /api/threads/{id}/artifacts{path}``
    (``frontend/src/core/artifacts/utils.ts``, ``urlOfArtifact``) serves it; bad paths get DeerFlow's errors."""
    outside, climbing = "/mnt/user-data/workspace/draft.md", "/mnt/user-data/outputs/../../../etc/passwd"
    script = write_script(
        tmp_path,
        [
            calls(tool_call("bash", command=f"mkdir -p /mnt/user-data/outputs && printf '# Report' > {REPORT}")),
            calls(
                tool_call("present_files", filepaths=[REPORT]),
                tool_call("present_files", filepaths=[REPORT, outside]),
                tool_call("present_files", filepaths=[climbing]),
                tool_call("present_files", filepaths="not a list"),
            ),
            answer("here it is"),
        ],
    )
    thread_id = unique("t")
    async with as_user(url, "alice") as alice, as_user(url, "bob") as bob:
        done = await run_wait(
            alice, thread_id, human("write a report"), if_not_exists="create", context={"model_name": script}
        )
        assert done.status_code == 200, done.text
        values = (await alice.get(f"/api/threads/{thread_id}/state")).json()["values"]
        assert values["artifacts"] == [REPORT]
        results = [m for m in values["messages"] if m["type"] == "tool" and m["name"] == "present_files"]
        assert [m["content"] for m in results[:3]] == [
            "Successfully presented files",
            f"Error: Only files in /mnt/user-data/outputs can be presented: {outside}",
            "Error: Access denied: path traversal detected",
        ]
        assert results[3]["status"] == "error" and "InvalidToolArguments" in results[3]["content"]

        served = await alice.get(f"/api/threads/{thread_id}/artifacts{REPORT}")
        assert (served.status_code, served.text) == (200, "# Report")
        assert (await bob.get(f"/api/threads/{thread_id}/artifacts{REPORT}")).status_code == 404
        assert (await bob.get(f"/api/threads/{thread_id}/state")).status_code == 404


@pytest.mark.parametrize(
    ("path", "presented"),
    [
        (REPORT, REPORT),
        ("mnt/user-data/outputs/a/./b.txt", "/mnt/user-data/outputs/a/b.txt"),
        ("/mnt/user-data/outputs/x/../report.md", REPORT),
    ],
)
def test_presented_paths_are_normalised_under_outputs(path: str, presented: str) -> None:
    assert presented_path(path) == presented


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/mnt/user-data/uploads/a.txt", "Only files in /mnt/user-data/outputs can be presented: "),
        ("/mnt/user-data/outputs", "Only files in /mnt/user-data/outputs can be presented: "),
        ("/mnt/user-dataX/outputs/a", "Only files in /mnt/user-data/outputs can be presented: "),
        ("/etc/passwd", "Only files in /mnt/user-data/outputs can be presented: "),
        ("report.md", "Only files in /mnt/user-data/outputs can be presented: "),
        ("/mnt/user-data/../etc/passwd", "Access denied: path traversal detected"),
    ],
)
def test_paths_outside_outputs_are_refused_in_deerflows_words(path: str, error: str) -> None:
    with pytest.raises(NotPresentableError) as refused:
        presented_path(path)
    assert str(refused.value) in (error + path, error)
