"""``image.inspect`` (the ``view_image`` tool) and ``image.load`` (ViewImage's injection): images read from the
thread's folders on this host, the ``/mnt/user-data`` of the local sandbox.

``inspect`` validates an image once and returns what the thread state records about it (mime type, size,
sha256, where it is) — never its bytes (DeerFlow #4138). ``load`` reads the recorded images again right before
a model call and hands back ``data:`` URLs, refusing any file that vanished, changed (size or sha256) or grew
past 20 MiB since it was viewed. Error texts are DeerFlow's ``view_image_tool``'s.

A sandbox that does not mount the thread folders (Kubernetes) keeps its files in the pod: ``view_image`` then
reports them as not found.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path, PurePosixPath

from temporalio import activity

from activities.paths import ThreadPaths
from workflows.contracts import (
    IMAGE_INSPECT,
    IMAGE_LOAD,
    ImageInspectInput,
    ImageInspectResult,
    ImageLoadInput,
    ImageLoadResult,
    ThreadRef,
    ViewedImage,
)
from workflows.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX

MAX_IMAGE_BYTES = 20 * 1024 * 1024
ALLOWED_ROOTS = tuple(f"{VIRTUAL_PATH_PREFIX}/{name}" for name in USER_DATA_DIRS)
EXTENSION_TO_MIME = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".webp": "image/webp"}


class _Refused(Exception):
    """A path or file ``view_image`` refuses; the message is what the model reads."""


def detect_mime(data: bytes) -> str | None:
    """The image type the bytes really are (magic numbers), whatever the file is called."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if len(data) >= 12 and data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _resolve(home: Path, thread: ThreadRef, virtual: str) -> Path:
    """The host file behind ``virtual``, which must stay inside the thread's user-data folders."""
    if not any(virtual == root or virtual.startswith(f"{root}/") for root in ALLOWED_ROOTS):
        raise _Refused(f"Error: Only image paths under {', '.join(ALLOWED_ROOTS)} are allowed")
    relative = PurePosixPath(virtual).relative_to(VIRTUAL_PATH_PREFIX)
    if ".." in relative.parts or "\0" in virtual:
        raise _Refused("Error: Access denied: path traversal detected")
    user_data = Path(os.path.realpath(ThreadPaths(home, thread.user_id, thread.thread_id).user_data))
    host = Path(os.path.realpath(user_data.joinpath(*relative.parts)))
    if not any(host.is_relative_to(user_data / name) for name in USER_DATA_DIRS):
        raise _Refused("Error: Access denied: path traversal detected")
    return host


def _inspect(home: Path, thread: ThreadRef, virtual: str) -> ImageInspectResult:
    host = _resolve(home, thread, virtual)
    suffix = PurePosixPath(virtual).suffix
    expected = EXTENSION_TO_MIME.get(suffix.lower())
    if expected is None:
        raise _Refused(f"Error: Unsupported image format: {suffix}. Supported formats: {', '.join(EXTENSION_TO_MIME)}")
    if not host.exists():
        raise _Refused(f"Error: Image file not found: {virtual}")
    if not host.is_file():
        raise _Refused(f"Error: Path is not a file: {virtual}")
    size = host.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise _Refused(
            f"Error: Image file is too large: {size} bytes. Maximum supported size is {MAX_IMAGE_BYTES} bytes"
        )
    data = host.read_bytes()
    detected = detect_mime(data)
    if detected is None:
        raise _Refused("Error: File contents do not match a supported image format")
    if detected != expected:
        raise _Refused(f"Error: Image contents are {detected}, but file extension indicates {expected}")
    return ImageInspectResult(
        mime_type=detected,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        actual_path=host.relative_to(Path(os.path.realpath(home))).as_posix(),
    )


def _data_url(home: Path, thread: ThreadRef, image: ViewedImage) -> str | None:
    """The image as it was viewed, or ``None``: missing, changed, or over the cap."""
    try:
        host = _resolve(home, thread, image.path)
        if not host.is_file() or host.stat().st_size != image.size or image.size > MAX_IMAGE_BYTES:
            return None
        data = host.read_bytes()
    except (_Refused, OSError, ValueError):
        return None
    if len(data) != image.size or (image.sha256 is not None and hashlib.sha256(data).hexdigest() != image.sha256):
        return None
    return f"data:{image.mime_type};base64,{base64.b64encode(data).decode('ascii')}"


class ImageActivities:
    def __init__(self, home: Path) -> None:
        self._home = home

    @activity.defn(name=IMAGE_INSPECT)
    def inspect(self, input: ImageInspectInput) -> ImageInspectResult:
        try:
            return _inspect(self._home, input.thread, input.path)
        except _Refused as refused:
            return ImageInspectResult(error=str(refused))
        except OSError as exc:
            return ImageInspectResult(error=f"Error reading image file: {type(exc).__name__}: {exc.strerror or exc}")

    @activity.defn(name=IMAGE_LOAD)
    def load(self, input: ImageLoadInput) -> ImageLoadResult:
        return ImageLoadResult([_data_url(self._home, input.thread, image) for image in input.images])
