"""ViewImage: the view_image tool, the transient image context message, and its file checks."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from temporalio.client import Client

from activities.images import MAX_IMAGE_BYTES, ImageActivities
from activities.thread_files import ThreadFiles
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.chain import build_lead_chain, describe
from middlewares.run_settings import RunSettings
from middlewares.view_image import (
    CONTEXT_HEADER,
    CONTEXT_ID_PREFIX,
    VIEW_IMAGE_TOOL,
    ViewImageMiddleware,
    image_blocks,
    is_image_context,
    should_inject,
)
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.contracts import (
    IMAGE_INSPECT,
    IMAGE_LOAD,
    MODEL_INVOKE,
    ImageInspectInput,
    ImageInspectResult,
    ImageLoadInput,
    ImageLoadResult,
    ModelCallInput,
    ThreadRef,
    ViewedImage,
)
from vocabulary.state import ThreadState, apply_update
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_inputs

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
JPEG = b"\xff\xd8\xff\xe0" + bytes(32)
THREAD = ThreadRef("default", "thread-1")
CHART = "/mnt/user-data/workspace/chart.png"


def _workspace(home: Path, thread: ThreadRef = THREAD) -> Path:
    path = home / "users" / thread.user_id / "threads" / thread.thread_id / "user-data" / "workspace"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _viewed(*calls: tuple[str, str]) -> AIMessage:
    return AIMessage("", id="a1", tool_calls=[{"name": name, "args": {}, "id": cid} for cid, name in calls])


# -- when the images are shown ---------------------------------------------------------------------------------


def test_images_are_shown_once_every_call_of_the_viewing_message_has_its_result() -> None:
    view = _viewed(("v1", "view_image"), ("l1", "ls"))
    done = [
        HumanMessage("look", id="h"),
        view,
        ToolMessage("ok", tool_call_id="v1"),
        ToolMessage("ok", tool_call_id="l1"),
    ]
    assert should_inject(done)
    assert not should_inject(done[:3]), "ls has no result yet"
    assert not should_inject([HumanMessage("look", id="h"), _viewed(("l1", "ls")), done[3]])
    assert not should_inject([HumanMessage("look", id="h")])
    shown = HumanMessage("x", id=f"{CONTEXT_ID_PREFIX}1", additional_kwargs={"deerflow_view_image_context": True})
    assert not should_inject([*done, shown])
    assert not should_inject([*done, HumanMessage(f"{CONTEXT_HEADER} (legacy)", id="old")])


def test_the_context_blocks_name_what_cannot_be_shown() -> None:
    images = [ViewedImage("/mnt/user-data/workspace/a.png", "image/png", 3), ViewedImage("/b.jpg", "image/jpeg", 4)]
    assert image_blocks(images, ["data:image/png;base64,AAA", None]) == [
        {"type": "text", "text": "Here are the images you've viewed:"},
        {"type": "text", "text": "\n- **/mnt/user-data/workspace/a.png** (image/png)"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
        {"type": "text", "text": "\n- **/b.jpg** (image/jpeg)"},
        {"type": "text", "text": "  (file unavailable or changed on disk: /b.jpg)"},
    ]
    assert image_blocks([], []) == [{"type": "text", "text": "No images have been viewed."}]


# -- the hooks with stubbed activities --------------------------------------------------------------------------


async def _call_tool(result: ImageInspectResult, name: str = "view_image") -> tuple[ToolResult, list[Any]]:
    async def inspect(arg: ImageInspectInput) -> ImageInspectResult:
        return result

    async def tool(request: ToolCallRequest) -> ToolResult:
        return ToolMessage("ran", tool_call_id=request.call_id)

    ctx = StubRunContext(activities={IMAGE_INSPECT: inspect})
    request = ToolCallRequest(
        {"name": name, "id": "v1", "args": {"image_path": CHART}}, VIEW_IMAGE_TOOL, ThreadState(), ctx
    )
    return await ViewImageMiddleware().wrap_tool_call(request, tool), ctx.calls


async def test_view_image_records_metadata_never_bytes() -> None:
    found = ImageInspectResult(mime_type="image/png", size=72, sha256="ab", actual_path="users/default/x.png")
    result, activity_calls = await _call_tool(found)
    assert isinstance(result, Command)
    assert result.update["viewed_images"] == {
        CHART: {"mime_type": "image/png", "size": 72, "sha256": "ab", "actual_path": "users/default/x.png"}
    }
    [message] = result.update["messages"]
    assert (message.content, message.tool_call_id, message.status) == ("Successfully read image", "v1", "success")
    assert activity_calls[0][2] == f"ViewImage.wrap_tool_call · inspect {CHART}"


async def test_view_image_errors_are_tool_errors_and_other_tools_pass_through() -> None:
    result, _ = await _call_tool(ImageInspectResult(error="Error: Image file not found: /x.png"))
    assert isinstance(result, ToolMessage) and result.status == "error"
    assert result.content == "Error: Image file not found: /x.png"
    passed, activity_calls = await _call_tool(ImageInspectResult(), name="ls")
    assert isinstance(passed, ToolMessage) and passed.content == "ran" and not activity_calls


async def test_the_image_context_lives_only_for_one_model_call() -> None:
    loads: list[ImageLoadInput] = []

    async def load(arg: ImageLoadInput) -> ImageLoadResult:
        loads.append(arg)
        return ImageLoadResult(["data:image/png;base64,QUJD"])

    ctx = StubRunContext(activities={IMAGE_LOAD: load})
    middleware = ViewImageMiddleware()
    messages: list[BaseMessage] = [
        HumanMessage("look", id="h"),
        _viewed(("v1", "view_image")),
        ToolMessage("Successfully read image", tool_call_id="v1", id="t1"),
    ]
    viewed = {CHART: {"mime_type": "image/png", "size": 3, "sha256": "s", "actual_path": "x"}}
    state = ThreadState(messages=messages, viewed_images=viewed)
    update = await middleware.before_model(state, ctx)
    assert update is not None
    state = apply_update(state, update, new_id=ctx.uuid)
    context = state.messages[-1]
    assert is_image_context(context) and context.additional_kwargs["hide_from_ui"] is True
    assert {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}} in context.content
    assert loads[0].images == [ViewedImage(CHART, "image/png", 3, "s")]
    assert await middleware.before_model(state, ctx) is None, "already shown"

    state = apply_update(state, {"messages": [AIMessage("a chart", id="a2")]}, new_id=ctx.uuid)
    removal = await middleware.after_model(state, ctx)
    assert removal == {"messages": [RemoveMessage(id=str(context.id))]}
    assert await middleware.after_agent(state, ctx) == removal, "also when the run ends mid-call"
    assert "QUJD" not in apply_update(state, removal, new_id=ctx.uuid).model_dump_json()
    assert await middleware.after_model(apply_update(state, removal, new_id=ctx.uuid), ctx) is None


def test_view_image_is_in_the_chain_only_for_vision_models() -> None:
    assert "ViewImage" not in describe(build_lead_chain(RunSettings()))
    names = describe(build_lead_chain(RunSettings.model_validate({"model_capabilities": {"vision": True}})))
    assert names.index("Memory") < names.index("ViewImage") < names.index("Clarification")


# -- the activities on real files -------------------------------------------------------------------------------


def test_inspect_checks_the_file_like_deerflow(home: Path) -> None:
    workspace = _workspace(home)
    (workspace / "chart.png").write_bytes(PNG)
    (workspace / "fake.png").write_bytes(JPEG)
    (workspace / "notes.png").write_text("not an image")
    (workspace / "folder.png").mkdir()
    with (workspace / "huge.png").open("wb") as f:
        f.truncate(MAX_IMAGE_BYTES + 1)
    images = ImageActivities(ThreadFiles.on_disk(home))

    def inspect(path: str) -> ImageInspectResult:
        return images.inspect(ImageInspectInput(THREAD, path))

    ok = inspect(CHART)
    assert (ok.error, ok.mime_type, ok.size) == (None, "image/png", len(PNG))
    assert ok.sha256 == hashlib.sha256(PNG).hexdigest()
    assert ok.actual_path == "users/default/threads/thread-1/user-data/workspace/chart.png"
    errors = {
        "/etc/passwd.png": "Error: Only image paths under /mnt/user-data/workspace, /mnt/user-data/uploads, "
        "/mnt/user-data/outputs are allowed",
        "/mnt/user-data/workspace/../../../x.png": "Error: Access denied: path traversal detected",
        "/mnt/user-data/workspace/a.gif": "Error: Unsupported image format: .gif. Supported formats: .jpg, .jpeg, "
        ".png, .webp",
        "/mnt/user-data/workspace/missing.png": "Error: Image file not found: /mnt/user-data/workspace/missing.png",
        "/mnt/user-data/workspace/folder.png": "Error: Path is not a file: /mnt/user-data/workspace/folder.png",
        "/mnt/user-data/workspace/huge.png": f"Error: Image file is too large: {MAX_IMAGE_BYTES + 1} bytes. "
        f"Maximum supported size is {MAX_IMAGE_BYTES} bytes",
        "/mnt/user-data/workspace/notes.png": "Error: File contents do not match a supported image format",
        "/mnt/user-data/workspace/fake.png": "Error: Image contents are image/jpeg, but file extension indicates "
        "image/png",
    }
    for path, error in errors.items():
        assert inspect(path).error == error, path


def test_outside_links_are_refused(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG)
    (_workspace(home) / "link.png").symlink_to(outside)
    images = ImageActivities(ThreadFiles.on_disk(home))
    result = images.inspect(ImageInspectInput(THREAD, "/mnt/user-data/workspace/link.png"))
    assert result.error == "Error: Access denied: path traversal detected"


def test_load_refuses_files_that_changed_since_they_were_viewed(home: Path) -> None:
    workspace = _workspace(home)
    for name in ("same.png", "grown.png", "swapped.png"):
        (workspace / name).write_bytes(PNG)
    digest = hashlib.sha256(PNG).hexdigest()
    (workspace / "grown.png").write_bytes(PNG + b"more")
    (workspace / "swapped.png").write_bytes(PNG[:-1] + b"\xff")

    def image(name: str) -> ViewedImage:
        return ViewedImage(f"/mnt/user-data/workspace/{name}", "image/png", len(PNG), digest)

    names = ("same.png", "grown.png", "swapped.png", "gone.png")
    loaded = ImageActivities(ThreadFiles.on_disk(home)).load(ImageLoadInput(THREAD, [image(n) for n in names]))
    assert loaded.data_urls == [f"data:image/png;base64,{base64.b64encode(PNG).decode()}", None, None, None]


# -- on a real run -----------------------------------------------------------------------------------------------


async def test_a_vision_run_sees_the_image_and_commits_no_base64(
    client: Client, home: Path, temporal_address: str
) -> None:
    thread = ThreadRef("default", unique("thread"))
    (_workspace(home, thread) / "chart.png").write_bytes(PNG)
    config = make_config(home, temporal_address, run={"model_capabilities": {"vision": True}})
    model = write_script(home, [calls(tool_call("view_image", "v1", image_path=CHART)), answer("a bar chart")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "what is in chart.png?", model=model, thread_id=thread.thread_id)
        view = await settle(handle)
        model_calls = await scheduled_inputs(client, await history_events(handle), MODEL_INVOKE, ModelCallInput)
    assert view.status == "completed" and view.final_message == "a bar chart"
    encoded = base64.b64encode(PNG).decode()
    seen = [m for m in model_calls[1].messages if is_image_context(m)]
    assert seen and {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}} in seen[0].content
    assert "view_image" in [t["function"]["name"] for t in model_calls[0].tools]

    state = thread_state(home, thread.thread_id)
    assert encoded not in json.dumps(state) and "base64" not in json.dumps(state)
    assert state["viewed_images"][CHART]["size"] == len(PNG)
    assert not [m for m in state["messages"] if str(m.get("id", "")).startswith(CONTEXT_ID_PREFIX)]
    assert [m["content"] for m in state["messages"] if m["type"] == "tool"] == ["Successfully read image"]
