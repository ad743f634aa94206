"""Images in a run's message, as LangGraph clients send them: stored like uploads, shown to a vision model.

Accepted blocks of the user's message: ``{type: image, mimeType | mime_type, data}`` (base64: Agent Chat UI's
``src/lib/multimodal-utils.ts``, LangChain's standard block), ``{type: image, url: "data:…"}``, and
``{type: image_url, image_url: {url: "data:…"}}`` (or ``image_url: "data:…"``, OpenAI's shape). Each image is
decoded, checked by its bytes (JPEG, PNG or WebP, at most 20 MiB: what ``view_image`` reads,
``activities/images.py``) and stored in the thread's uploads as ``image-{sha256[:12]}.{ext}``, like a file sent
to ``POST /threads/{id}/uploads`` (``workers/api/files.py``). The run names them as the message's files (the
model is told where they are) and as its images (``RunInput.images``): ViewImage then shows them to the model as
content blocks for the message's first answer (``middlewares/view_image.py``), so the thread's state and the
workflow's history hold paths, never the bytes past that one model call (whose payload goes to storage past
``storage.payload_threshold_bytes``).

Refused with 422 before anything is written: an image for a model whose ``supports_vision`` is not set (the
config's ``models`` entry), an image that is not base64 or not one of those formats, a remote URL (the server
fetches nothing for a caller), and any other media block (a PDF ``file``: upload it instead).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from activities.images import MAX_IMAGE_BYTES, detect_mime
from vocabulary.contracts import ThreadRef
from workers.api.deps import ApiContext
from workers.api.files import save_uploads
from workers.models import RunModel

EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png", "image/webp": "webp"}
_TEXT_BLOCKS = frozenset({"text"})


@dataclass(frozen=True)
class AttachedImage:
    name: str
    data: bytes


def message_images(message: dict[str, Any] | None) -> list[AttachedImage]:
    """The images of the user's message, decoded and checked (422 for a block this server does not read)."""
    content = (message or {}).get("content")
    if not isinstance(content, list):
        return []
    images: dict[str, AttachedImage] = {}
    for index, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") in _TEXT_BLOCKS:
            continue
        image = _decoded(block, f"content[{index}]")
        images.setdefault(image.name, image)
    return list(images.values())


def _decoded(block: dict[str, Any], where: str) -> AttachedImage:
    kind = block.get("type")
    if kind == "image_url":
        url = block.get("image_url")
        raw = _data_url(url.get("url") if isinstance(url, dict) else url, where)
    elif kind == "image" and isinstance(block.get("data"), str):
        raw = _base64(block["data"], where)
    elif kind == "image":
        raw = _data_url(block.get("url"), where)
    else:
        raise HTTPException(
            422,
            f"input.messages: {where} is a {str(kind)[:40]!r} block; only text and images are read "
            "(upload other files: POST /threads/{thread_id}/uploads)",
        )
    if len(raw) > MAX_IMAGE_BYTES:
        raise HTTPException(422, f"input.messages: {where} is {len(raw)} bytes; an image may be {MAX_IMAGE_BYTES}")
    mime = detect_mime(raw)
    if mime is None:
        raise HTTPException(422, f"input.messages: {where} is not a JPEG, PNG or WebP image")
    digest = hashlib.sha256(raw).hexdigest()[:12]
    return AttachedImage(f"image-{digest}.{EXTENSIONS[mime]}", raw)


def _data_url(url: Any, where: str) -> bytes:
    if not isinstance(url, str) or not url.startswith("data:"):
        raise HTTPException(422, f"input.messages: {where} must carry the image itself (base64 data or a data: URL)")
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise HTTPException(422, f"input.messages: {where} is not a base64 data: URL")
    return _base64(payload, where)


def _base64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(422, f"input.messages: {where} is not valid base64") from None


def require_vision(chosen: RunModel, images: list[AttachedImage]) -> None:
    """422 when the message has images and the run's model cannot see them."""
    if images and not chosen.settings.model_capabilities.vision:
        raise HTTPException(
            422,
            f"input.messages: the message has {len(images)} image(s) but model {chosen.spec!r} cannot see images "
            "(set supports_vision on its models entry, or choose a vision model)",
        )


async def store_images(context: ApiContext, thread: ThreadRef, images: list[AttachedImage]) -> None:
    """Write the images to the thread's uploads (replacing the same image sent before: same bytes, same name)."""
    if images:
        await asyncio.to_thread(save_uploads, context, thread, [(image.name, image.data) for image in images])
