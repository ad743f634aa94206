"""Images a run views (``activities/images.py``): check one the model asked for, then load them as data URLs."""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef


@dataclass
class ImageInspectInput:
    thread: ThreadRef
    path: str
    """The virtual path the model asked ``view_image`` for."""


@dataclass
class ImageInspectResult:
    """What ``view_image`` records about an image, or the ``Error: ...`` text the model gets instead."""

    error: str | None = None
    mime_type: str = ""
    size: int = 0
    sha256: str = ""
    actual_path: str = ""
    """The file relative to the storage home."""


@dataclass
class ViewedImage:
    path: str
    mime_type: str
    size: int
    sha256: str | None = None


@dataclass
class ImageLoadInput:
    thread: ThreadRef
    images: list[ViewedImage]


@dataclass
class ImageLoadResult:
    data_urls: list[str | None]
    """Per requested image, in order: a ``data:`` URL, or ``None`` when the file is gone, changed or too big."""


IMAGE_INSPECT = ActivityRef("image.inspect", ImageInspectInput, ImageInspectResult)
IMAGE_LOAD = ActivityRef("image.load", ImageLoadInput, ImageLoadResult)
