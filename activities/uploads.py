"""A thread's uploads: storing files into its uploads folder (the CLI) and the ``uploads.list`` activity.

Uploaded files keep their own names under ``user-data/uploads``; the model sees them as
``/mnt/user-data/uploads/{name}``. A document converted to Markdown has a sibling ``.md`` (``report.pdf`` →
``report.md``); its headings are the outline the Uploads middleware shows, so the model can ``read_file``
the right line range instead of reading everything.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from temporalio import activity

from activities.contract import implements
from activities.storage import ObjectStore
from activities.thread_files import PathEscapeError, ThreadFiles
from vocabulary.contracts import (
    UPLOADS_LIST,
    OutlineEntry,
    ThreadRef,
    UploadedFile,
    UploadsListInput,
    UploadsListResult,
)
from vocabulary.paths import (
    VIRTUAL_UPLOADS_DIR,
    is_upload_staging_file,
    thread_dir,
)

MAX_OUTLINE_ENTRIES = 50
OUTLINE_PREVIEW_LINES = 5
_TITLE_MAX_CHARS = 200
_PREVIEW_MAX_CHARS = 2000
_TRUNCATED = "… (truncated)"

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*))?$")
# PDF-to-Markdown converters leave some headings as bold text: "**ITEM 1. BUSINESS**", "**1** **Introduction**".
_BOLD_HEADING = re.compile(
    r"^\*\*((?:ITEM|PART|SECTION|SCHEDULE|EXHIBIT|APPENDIX|ANNEX|CHAPTER)\b[A-Z0-9 .,\-]*)\*\*\s*$"
)
_SPLIT_BOLD_HEADING = re.compile(
    r"^\*\*[\dA-Z][\d.]*\*\*\s+\*\*(?!\d[\d\s.,\-–—/:()%]*\*\*)[^*]+\*\*(?:\s+\*\*[^*]+\*\*){0,2}\s*$"
)


class UploadError(ValueError):
    """A file that cannot be uploaded; the message names it."""


MAX_UPLOAD_NAME_BYTES = 200
"""UTF-8 bytes of an upload's name. A filesystem name holds 255 bytes, and the atomic write's temp file adds
43 to the name (``.{name}.{32 hex}.sync-tmp``): a 213-byte name could never be written (it was a 500)."""
_HIDDEN_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]")
"""Control characters (C0, DEL, C1), line and paragraph separators, and the invisible formatting ones (zero-width
characters, the bidi embeddings, overrides and isolates): they make a name display as another name
(``invoice\u202etxt.exe``) or break the lines the model and the logs show it in."""


def validate_upload_name(name: str) -> str:
    """A name that is one safe path segment (no ``..``, ``/``, ``\\`` or NUL), shows as what it is (no control
    or bidi characters), fits a filesystem name (:data:`MAX_UPLOAD_NAME_BYTES`) and is no staging file."""
    if not name or name in (".", "..") or any(bad in name for bad in ("..", "/", "\\", "\0")):
        raise UploadError(f"invalid upload name {name!r}: it must be a plain file name without '..', '/' or NUL")
    if (hidden := _HIDDEN_CHARACTERS.search(name)) is not None:
        raise UploadError(
            f"invalid upload name {name!r}: it holds the control or formatting character U+{ord(hidden.group()):04X}"
        )
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise UploadError(f"invalid upload name {name!r}: it is not valid Unicode text") from None
    if size > MAX_UPLOAD_NAME_BYTES:
        raise UploadError(
            f"invalid upload name {name[:40]!r}…: it is {size} bytes in UTF-8; the limit is {MAX_UPLOAD_NAME_BYTES}"
        )
    if is_upload_staging_file(name):
        raise UploadError(f"invalid upload name {name!r}: names like '.upload-*.part' are reserved")
    return name


def upload_key(thread: ThreadRef, name: str) -> str:
    """Where an upload lives in storage — on the filesystem backend exactly its path under the home."""
    return f"{thread_dir(thread.user_id, thread.thread_id)}/user-data/uploads/{validate_upload_name(name)}"


def store_uploads(store: ObjectStore, thread: ThreadRef, sources: Sequence[Path]) -> list[UploadedFile]:
    """Copy ``sources`` into the thread's uploads in ``store`` under their own names (replacing same-named ones).

    Every source is checked before the first copy, so a bad one leaves the uploads untouched. Each object is
    written atomically (a renamed temp file on the filesystem, one PutObject on S3), so a run never lists a
    half-written upload.
    """
    stored = []
    for name, source in check_uploads(sources).items():
        data = source.read_bytes()
        try:
            store.put(upload_key(thread, name), data)
        except PathEscapeError as exc:  # the filesystem backend: a folder on the way is a symlink a run left
            raise UploadError(f"cannot upload {name!r}: {exc}") from None
        stored.append(UploadedFile(name, len(data)))
    return stored


def check_uploads(sources: Sequence[Path]) -> dict[str, Path]:
    """The uploads' names and sources, or :class:`UploadError` for the first bad one; writes nothing."""
    names: dict[str, Path] = {}
    for source in sources:
        name = validate_upload_name(source.name)
        if name in names:
            raise UploadError(f"two files are named {name!r}: {names[name]} and {source}")
        if not source.is_file():
            raise UploadError(f"cannot upload {source}: not a file")
        if not os.access(source, os.R_OK):
            raise UploadError(f"cannot upload {source}: permission denied")
        names[name] = source
    return names


# -- outlines --------------------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(_TRUNCATED))].rstrip() + _TRUNCATED


def _plain_title(raw: str) -> str:
    """A heading's text without closing hashes and without the ``**bold**`` wrappers converters leave."""
    text = raw.rstrip(" \t")
    without_hashes = text.rstrip("#")
    if len(without_hashes) < len(text) and (not without_hashes or without_hashes[-1] in " \t"):
        text = without_hashes.rstrip(" \t")
    text = re.sub(r"\*\*\s*\*\*", " ", text).strip()
    if match := re.fullmatch(r"\*\*(.+?)\*\*", text, re.DOTALL):
        text = match.group(1).strip()
    return text


def _text_lines(markdown: bytes) -> io.TextIOWrapper:
    """The file's lines as ``open(encoding="utf-8-sig")`` yields them, so line numbers match ``read_file``'s."""
    return io.TextIOWrapper(io.BytesIO(markdown), encoding="utf-8-sig", errors="replace")


def extract_outline(markdown: bytes) -> tuple[list[OutlineEntry], bool]:
    """Headings of a Markdown file (outside code blocks) as ``(entries, truncated)``, at most 50 entries."""
    entries: list[OutlineEntry] = []
    fence = ""
    with _text_lines(markdown) as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            marker = _FENCE.match(line)
            if fence:
                if marker and marker.group(1).startswith(fence) and not marker.group(2).strip(" \t"):
                    fence = ""  # a closing fence: same character, at least as long, no info string
                continue
            # A backtick fence's info string cannot contain backticks (CommonMark).
            if marker and (marker.group(1)[0] == "~" or "`" not in marker.group(2)):
                fence = marker.group(1)
                continue
            if line.startswith("    ") or line[:4].lstrip(" ").startswith("\t"):
                continue  # indented code
            stripped = line.strip()
            title = ""
            if (atx := _ATX_HEADING.fullmatch(line)) is not None:
                title = _plain_title(atx.group(1) or "")
            elif (bold := _BOLD_HEADING.match(stripped)) is not None:
                title = bold.group(1).strip()
            elif _SPLIT_BOLD_HEADING.match(stripped):
                title = " ".join(re.findall(r"\*\*([^*]+)\*\*", stripped))
            if not title:
                continue
            if len(entries) == MAX_OUTLINE_ENTRIES:
                return entries, True
            entries.append(OutlineEntry(_clip(title, _TITLE_MAX_CHARS), number))
    return entries, False


def outline_preview(markdown: bytes) -> list[str]:
    """The first non-empty lines, for documents without headings (at most 2,000 characters in all)."""
    preview: list[str] = []
    room = _PREVIEW_MAX_CHARS
    with _text_lines(markdown) as f:
        for raw in f:
            if (stripped := raw.strip()) == "":
                continue
            text = _clip(stripped, room)
            preview.append(text)
            room -= len(text)
            if len(text) < len(stripped) or len(preview) >= OUTLINE_PREVIEW_LINES or room <= 0:
                break
    return preview


def describe_upload(files: ThreadFiles, thread: ThreadRef, name: str, *, with_outline: bool) -> UploadedFile | None:
    """The upload ``name`` (with the outline of its sibling ``.md``), or ``None`` when it is not a file."""
    try:
        info = files.info(thread, f"{VIRTUAL_UPLOADS_DIR}/{name}")
    except PathEscapeError:  # a symlink out of the thread's folders
        return None
    if info is None or info.is_dir:
        return None
    file = UploadedFile(name, info.size)
    stem = PurePosixPath(name)
    markdown = name if stem.suffix.lower() == ".md" else stem.with_suffix(".md").name
    if not with_outline:
        return file
    try:
        data = files.read(thread, f"{VIRTUAL_UPLOADS_DIR}/{markdown}")
    except (OSError, PathEscapeError):
        activity.logger.warning("cannot read the outline of %s", name, exc_info=True)
        return file
    if data is not None:
        file.outline, file.outline_truncated = extract_outline(data)
        if not file.outline:
            file.outline_preview = outline_preview(data)
    return file


class UploadActivities:
    def __init__(self, files: ThreadFiles) -> None:
        self._files = files

    @implements(UPLOADS_LIST)
    def list_uploads(self, input: UploadsListInput) -> UploadsListResult:
        found: list[UploadedFile] = []
        for name in input.filenames:
            if Path(name).name != name or name in ("", ".", "..") or is_upload_staging_file(name):
                continue
            file = describe_upload(self._files, input.thread, name, with_outline=len(found) < input.outline_limit)
            if file is not None:
                found.append(file)
        return UploadsListResult(found)
