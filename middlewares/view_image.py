"""ViewImage: let a vision model look at the images it asked for (DeerFlow's ``ViewImageMiddleware`` and its
``view_image`` tool). In the chain only when ``run.model_capabilities.vision`` is set.

Hooks
* ``tools`` — contributes ``view_image``, which this middleware answers itself.
* ``wrap_tool_call`` — a ``view_image`` call is checked by the ``image.inspect`` activity (allowed folders,
  format by magic number, 20 MiB cap). Success writes **thread state**: ``viewed_images[path] = {mime_type,
  size, sha256, actual_path}`` and ``Successfully read image``; never the image bytes.
* ``before_agent`` — images that came with the user's message (``additional_kwargs["attached_images"]``: their
  uploads' virtual paths, set from ``RunInput.images``, which the Agent Server fills from a message's image
  blocks, ``workers/api/images.py``) are inspected like a ``view_image`` call and recorded in ``viewed_images``.
* ``before_model`` — when the last AIMessage called ``view_image`` and all its calls have results, or the user's
  message brought images and no answer followed it yet, the
  ``image.load`` activity reads every viewed image again and a hidden multimodal HumanMessage
  (``view-image-context:…``, ``deerflow_view_image_context``) is appended for this model call; an image that
  vanished or changed since it was viewed is named instead of shown. **Thread state**, transient:
* ``after_model`` / ``after_agent`` — remove that message again (``RemoveMessage``), so the committed state
  never holds base64. after_agent covers a run that failed or was cancelled during the model call.

Parts: the contract ``vocabulary/contracts/images.py`` (``IMAGE_INSPECT``, ``IMAGE_LOAD``) and its activities
``activities/images.py``; ``viewed_images`` and its reducer in ``vocabulary/state.py``; MCP images
(``MCP_IMAGES_KEY``) in ``vocabulary/tools.py``. Tests: ``tests/test_view_image.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from temporalio.common import RetryPolicy

from middlewares._activity_call import call_activity
from middlewares.base import Command, Middleware, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import ActivityOptions, RunContext
from vocabulary.contracts import (
    IMAGE_INSPECT,
    IMAGE_LOAD,
    ImageInspectInput,
    ImageInspectResult,
    ImageLoadInput,
    ViewedImage,
)
from vocabulary.messages import message_text
from vocabulary.state import StateUpdate, ThreadState
from vocabulary.tools import MCP_IMAGES_KEY, ToolSpec

TOOL_NAME = "view_image"
CONTEXT_ID_PREFIX = "view-image-context:"
CONTEXT_MARKER_KEY = "deerflow_view_image_context"
ATTACHED_IMAGES_KEY = "attached_images"
CONTEXT_HEADER = "Here are the images you've viewed:"
NO_IMAGES_TEXT = "No images have been viewed."
SUCCESS_TEXT = "Successfully read image"

VIEW_IMAGE_TOOL = ToolSpec(
    TOOL_NAME,
    "Read an image file.\n\n"
    "Use this tool to read an image file and make it available for display.\n\n"
    "When to use the view_image tool:\n"
    "- When you need to view an image file.\n\n"
    "When NOT to use the view_image tool:\n"
    "- For non-image files (use present_files instead)\n"
    "- For multiple files at once (use present_files instead)",
    {
        "type": "object",
        "properties": {
            "image_path": {
                "type": "string",
                "description": "Absolute /mnt/user-data virtual path to the image file. "
                "Common formats supported: jpg, jpeg, png, webp.",
            }
        },
        "required": ["image_path"],
    },
    intercepted=True,
)

_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
)


def is_image_context(message: BaseMessage) -> bool:
    return (
        isinstance(message, HumanMessage)
        and bool(message.id)
        and str(message.id).startswith(CONTEXT_ID_PREFIX)
        and message.additional_kwargs.get(CONTEXT_MARKER_KEY) is True
    )


def should_inject(messages: Sequence[BaseMessage]) -> bool:
    """The last AIMessage called ``view_image`` (or an MCP tool that returned images), every one of its calls has
    a result, and the images have not been shown since (as a context message, or the legacy header text)."""
    index = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None)
    if index is None:
        return False
    ai = messages[index]
    assert isinstance(ai, AIMessage)
    after = messages[index + 1 :]
    # MCP results that carried images record them like view_image does (workflows/run/mcp_tools.py).
    mcp_images = any(isinstance(m, ToolMessage) and m.additional_kwargs.get(MCP_IMAGES_KEY) for m in after)
    if not mcp_images and not any(call.get("name") == TOOL_NAME for call in ai.tool_calls):
        return False
    answered = {m.tool_call_id for m in after if isinstance(m, ToolMessage)}
    if not {call["id"] for call in ai.tool_calls if call.get("id")} <= answered:
        return False
    return not any(
        is_image_context(m) or (isinstance(m, HumanMessage) and CONTEXT_HEADER in message_text(m)) for m in after
    )


def attached_images(messages: Sequence[BaseMessage]) -> list[str]:
    """The images the latest user message brought, while no model answer follows it (none otherwise)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return []
        if isinstance(message, HumanMessage) and isinstance(message.additional_kwargs.get(ATTACHED_IMAGES_KEY), list):
            return [path for path in message.additional_kwargs[ATTACHED_IMAGES_KEY] if isinstance(path, str)]
    return []


def image_blocks(images: list[ViewedImage], data_urls: list[str | None]) -> list[str | dict[str, Any]]:
    if not images:
        return [{"type": "text", "text": NO_IMAGES_TEXT}]
    blocks: list[str | dict[str, Any]] = [{"type": "text", "text": CONTEXT_HEADER}]
    for image, url in zip(images, data_urls, strict=True):
        blocks.append({"type": "text", "text": f"\n- **{image.path}** ({image.mime_type})"})
        if url is None:
            blocks.append({"type": "text", "text": f"  (file unavailable or changed on disk: {image.path})"})
        else:
            blocks.append({"type": "image_url", "image_url": {"url": url}})
    return blocks


def _viewed(state: ThreadState) -> list[ViewedImage]:
    return [
        ViewedImage(
            path=path,
            mime_type=str(record.get("mime_type", "unknown")),
            size=int(record.get("size", 0)),
            sha256=record.get("sha256") if isinstance(record.get("sha256"), str) else None,
        )
        for path, record in state.viewed_images.items()
    ]


def _record(found: ImageInspectResult) -> dict[str, Any]:
    """What ``viewed_images`` keeps of an inspected image: never its bytes."""
    return {"mime_type": found.mime_type, "size": found.size, "sha256": found.sha256, "actual_path": found.actual_path}


async def _inspect(ctx: RunContext, path: str, hook: str) -> ImageInspectResult:
    """The image at ``path`` checked by the ``image.inspect`` activity (the Web UI's summary names ``hook``)."""
    summary = f"ViewImage.{hook} · inspect {path}"
    return await call_activity(
        ctx, IMAGE_INSPECT, ImageInspectInput(ctx.thread, path), summary=summary, options=_OPTIONS
    )


def _remove_image_context(state: ThreadState) -> StateUpdate | None:
    removals = [RemoveMessage(id=str(m.id)) for m in state.messages if is_image_context(m)]
    return {"messages": removals} if removals else None


class ViewImageMiddleware(Middleware):
    def tools(self) -> list[ToolSpec]:
        return [VIEW_IMAGE_TOOL]

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        if request.name != TOOL_NAME:
            return await handler(request)
        ctx, call_id = request.ctx, request.call_id
        path = request.args.get("image_path") if isinstance(request.args, dict) else None
        if not isinstance(path, str) or not path:
            return ToolMessage(
                "Error: image_path is required", tool_call_id=call_id, name=TOOL_NAME, status="error", id=ctx.uuid()
            )
        found = await _inspect(ctx, path, "wrap_tool_call")
        if found.error is not None:
            return ToolMessage(found.error, tool_call_id=call_id, name=TOOL_NAME, status="error", id=ctx.uuid())
        message = ToolMessage(SUCCESS_TEXT, tool_call_id=call_id, name=TOOL_NAME, id=ctx.uuid())
        return Command(update={"viewed_images": {path: _record(found)}, "messages": [message]})

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        recorded: dict[str, Any] = {}
        for path in attached_images(state.messages):
            if path in state.viewed_images or path in recorded:
                continue
            found = await _inspect(ctx, path, "before_agent")
            if found.error is None:  # the API checked it before the run started: only a file gone since fails
                recorded[path] = _record(found)
        return {"viewed_images": recorded} if recorded else None

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        if not should_inject(state.messages) and not attached_images(state.messages):
            return None
        images = _viewed(state)
        urls: list[str | None] = []
        if images:
            loaded = await call_activity(
                ctx,
                IMAGE_LOAD,
                ImageLoadInput(ctx.thread, images),
                summary=f"ViewImage.before_model · read {len(images)} image(s)",
                options=_OPTIONS,
            )
            urls = loaded.data_urls
        message = HumanMessage(
            content=image_blocks(images, urls),
            id=CONTEXT_ID_PREFIX + ctx.uuid().replace("-", ""),
            additional_kwargs={"hide_from_ui": True, CONTEXT_MARKER_KEY: True},
        )
        return {"messages": [message]}

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        return _remove_image_context(state)

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        return _remove_image_context(state)
