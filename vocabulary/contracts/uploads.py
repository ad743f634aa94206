"""The files uploaded to a thread, with the outlines the prompt lists (``activities/uploads.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef


@dataclass
class UploadsListInput:
    thread: ThreadRef
    filenames: list[str]
    """Names in the thread's uploads folder; names with path components are ignored."""
    outline_limit: int = 10
    """Outlines are read for the first ``outline_limit`` present files only (those the prompt lists)."""


@dataclass
class OutlineEntry:
    title: str
    line: int
    """1-based line of the heading in the sibling ``.md``."""


@dataclass
class UploadedFile:
    filename: str
    size: int
    """Bytes on disk."""
    outline: list[OutlineEntry] = field(default_factory=list)
    outline_truncated: bool = False
    outline_preview: list[str] = field(default_factory=list)
    """First lines of the ``.md`` when it has no headings."""


@dataclass
class UploadsListResult:
    files: list[UploadedFile]
    """The requested files that exist as regular files, in request order."""


UPLOADS_LIST = ActivityRef("uploads.list", UploadsListInput, UploadsListResult)
