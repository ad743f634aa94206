"""``image.inspect`` (the ``view_image`` tool) and ``image.load`` (ViewImage's injection): images read from the
thread's folders on this host, the ``/mnt/user-data`` of the local sandbox.

``inspect`` validates an image once and returns what the thread state records about it (mime type, size,
sha256, where it is) — never its bytes (DeerFlow #4138). ``load`` reads the recorded images again right before
a model call and hands back ``data:`` URLs, refusing any file that vanished, changed (size or sha256) or grew
past 20 MiB since it was viewed. Error texts are DeerFlow's ``view_image_tool``'s.

The images are read from the thread's files on the configured storage (``ThreadFiles``): the folders under the
home on the filesystem backend, the bucket on S3 (where every sandbox tool call's changes were pushed). A
sandbox that does not mount the thread folders (Kubernetes) keeps its files in the pod: ``view_image`` then
reports them as not found.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import PurePosixPath

from activities.contract import implements
from activities.thread_files import PathEscapeError, ThreadFiles
from vocabulary.contracts import (
    IMAGE_INSPECT,
    IMAGE_LOAD,
    ImageInspectInput,
    ImageInspectResult,
    ImageLoadInput,
    ImageLoadResult,
    ThreadRef,
    ViewedImage,
)
from vocabulary.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX

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


def _check_path(virtual: str) -> None:
    """Refuse paths outside the thread's user-data folders with DeerFlow's texts."""
    if not any(virtual == root or virtual.startswith(f"{root}/") for root in ALLOWED_ROOTS):
        raise _Refused(f"Error: Only image paths under {', '.join(ALLOWED_ROOTS)} are allowed")
    if ".." in PurePosixPath(virtual).parts or "\0" in virtual:
        raise _Refused("Error: Access denied: path traversal detected")


def _inspect(files: ThreadFiles, thread: ThreadRef, virtual: str) -> ImageInspectResult:
    _check_path(virtual)
    suffix = PurePosixPath(virtual).suffix
    expected = EXTENSION_TO_MIME.get(suffix.lower())
    if expected is None:
        raise _Refused(f"Error: Unsupported image format: {suffix}. Supported formats: {', '.join(EXTENSION_TO_MIME)}")
    try:
        info = files.info(thread, virtual)
    except PathEscapeError:
        raise _Refused("Error: Access denied: path traversal detected") from None
    if info is None:
        raise _Refused(f"Error: Image file not found: {virtual}")
    if info.is_dir:
        raise _Refused(f"Error: Path is not a file: {virtual}")
    if info.size > MAX_IMAGE_BYTES:
        raise _Refused(
            f"Error: Image file is too large: {info.size} bytes. Maximum supported size is {MAX_IMAGE_BYTES} bytes"
        )
    data = files.read(thread, virtual)
    if data is None:  # deleted between the two looks
        raise _Refused(f"Error: Image file not found: {virtual}")
    detected = detect_mime(data)
    if detected is None:
        raise _Refused("Error: File contents do not match a supported image format")
    if detected != expected:
        raise _Refused(f"Error: Image contents are {detected}, but file extension indicates {expected}")
    return ImageInspectResult(
        mime_type=detected,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        actual_path=files.key(thread, virtual),
    )


def _data_url(files: ThreadFiles, thread: ThreadRef, image: ViewedImage) -> str | None:
    """The image as it was viewed, or ``None``: missing, changed, or over the cap."""
    try:
        _check_path(image.path)
        info = files.info(thread, image.path)
        if info is None or info.is_dir or info.size != image.size or image.size > MAX_IMAGE_BYTES:
            return None
        data = files.read(thread, image.path)
    except (_Refused, OSError, ValueError):  # ValueError: PathEscapeError, bad ids
        return None
    if data is None or len(data) != image.size:
        return None
    if image.sha256 is not None and hashlib.sha256(data).hexdigest() != image.sha256:
        return None
    return f"data:{image.mime_type};base64,{base64.b64encode(data).decode('ascii')}"


class ImageActivities:
    def __init__(self, files: ThreadFiles) -> None:
        self._files = files

    @implements(IMAGE_INSPECT)
    def inspect(self, input: ImageInspectInput) -> ImageInspectResult:
        try:
            return _inspect(self._files, input.thread, input.path)
        except _Refused as refused:
            return ImageInspectResult(error=str(refused))
        except OSError as exc:
            return ImageInspectResult(error=f"Error reading image file: {type(exc).__name__}: {exc.strerror or exc}")

    @implements(IMAGE_LOAD)
    def load(self, input: ImageLoadInput) -> ImageLoadResult:
        return ImageLoadResult([_data_url(self._files, input.thread, image) for image in input.images])
