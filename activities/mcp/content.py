"""An MCP ``CallToolResult`` as the text of a ToolMessage.

Text blocks are joined with newlines; an embedded text resource becomes its text under a ``[resource URI]``
line. Images (image blocks, and image blobs in embedded resources) take ``view_image``'s path: the bytes are
stored under the thread's ``/mnt/user-data/outputs/.mcp-images/`` and recorded as ``viewed_images`` entries,
which ViewImage shows a vision model before its next call; the text names the file. Audio, other binary
resources and resource links are named, never inlined. A result with no content but structured content
gives that as JSON.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from activities.images import MAX_IMAGE_BYTES, detect_mime
from activities.thread_files import ThreadFiles
from vocabulary.contracts import ThreadRef
from vocabulary.paths import VIRTUAL_PATH_PREFIX

IMAGES_DIR = f"{VIRTUAL_PATH_PREFIX}/outputs/.mcp-images"
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class RenderedResult:
    text: str
    viewed_images: dict[str, dict[str, Any]] = field(default_factory=dict)


def render(
    result: types.CallToolResult, *, tool_name: str, thread: ThreadRef, files: ThreadFiles | None
) -> RenderedResult:
    rendered = RenderedResult("")
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent):
            parts.append(_image(rendered, block.data, block.mime_type, tool_name, thread, files))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(f"[resource {resource.uri}]\n{resource.text}")
            elif (resource.mime_type or "").startswith("image/"):
                parts.append(_image(rendered, resource.blob, resource.mime_type or "", tool_name, thread, files))
            else:
                size = len(resource.blob) * 3 // 4
                kind = resource.mime_type or "unknown type"
                parts.append(f"[binary resource {resource.uri} ({kind}, ~{size} bytes)]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link {block.uri}" + (f": {block.name}]" if block.name else "]"))
        elif isinstance(block, types.AudioContent):
            parts.append(f"[audio ({block.mime_type}) omitted]")
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content omitted]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    rendered.text = "\n".join(parts)
    return rendered


def _image(
    rendered: RenderedResult, data: str, mime: str, tool_name: str, thread: ThreadRef, files: ThreadFiles | None
) -> str:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[image ({mime}) could not be decoded]"
    actual = detect_mime(raw)
    if files is None or actual is None or len(raw) > MAX_IMAGE_BYTES:
        reason = "no thread storage" if files is None else "unsupported or too large"
        return f"[image ({mime}, {len(raw)} bytes) not stored: {reason}]"
    digest = hashlib.sha256(raw).hexdigest()
    path = f"{IMAGES_DIR}/{_UNSAFE.sub('_', tool_name)}-{digest[:12]}.{_EXTENSIONS[actual]}"
    files.write(thread, path, raw)
    rendered.viewed_images[path] = {
        "mime_type": actual,
        "size": len(raw),
        "sha256": digest,
        "actual_path": files.key(thread, path),
    }
    return f"[image saved to {path} ({actual}, {len(raw)} bytes)]"
