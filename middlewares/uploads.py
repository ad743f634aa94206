"""Uploads: tell the model which files came with this message — where they are, never what they contain.

Hook
* ``before_agent``: the last message's ``additional_kwargs["files"]`` (file names, as the run sets them from
  ``RunInput.files``, or DeerFlow's ``{filename, ...}`` dicts) are checked by the ``uploads.list`` activity,
  which returns the ones present in the thread's uploads folder with their sizes and, for the first
  ``max_files_per_context_section``, the outline of a sibling ``.md``. Names with path components and upload
  staging files are ignored. The ``<current_uploads>`` envelope (virtual paths, sizes, outlines, counts by
  extension for files past the cap) is prepended to the message, whose pre-injection text is kept in
  ``additional_kwargs["original_user_content"]`` (first writer wins). ``uploaded_files`` lists this message's
  files, and is reset to ``[]`` on every other turn so a stale list never outlives its message. Historical
  uploads are not listed (DeerFlow's agent lists them with a tool when it needs them).

Writes: thread state (``uploaded_files``, the enriched message); reads the uploads folder through an activity.

Parts: the contract ``vocabulary/contracts/uploads.py`` (``UPLOADS_LIST``) and its activity
``activities/uploads.py``; the virtual paths ``vocabulary/paths.py``; the clients that store uploads and name them
on the run: ``workers/api/files.py``, ``hartflow run --file`` (``workers/cli/runs.py``), ``workers/client/runs.py``
(``files``). Helpers: ``middlewares/_untrusted.py``. Tests: ``tests/test_uploads.py``.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from pathlib import PurePosixPath
from typing import Any

from langchain_core.messages import HumanMessage
from pydantic import BaseModel, ConfigDict, Field

from middlewares._activity_call import call_activity
from middlewares._untrusted import neutralize_untrusted_tags
from middlewares.base import Middleware
from middlewares.context import ActivityOptions, RunContext
from vocabulary.contracts import UPLOADS_LIST, UploadedFile, UploadsListInput
from vocabulary.messages import message_text
from vocabulary.paths import VIRTUAL_UPLOADS_DIR, is_upload_staging_file
from vocabulary.state import StateUpdate, ThreadState

ORIGINAL_USER_CONTENT_KEY = "original_user_content"
_SEARCH_HINT = f"grep(pattern='keyword', path='{VIRTUAL_UPLOADS_DIR}/')"


class UploadsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_files_per_context_section: int = Field(default=10, ge=1, description="files listed before counting the rest")


def attached_filenames(message: HumanMessage) -> list[str]:
    """The plain file names a message says it carries, in order."""
    names = []
    for entry in message.additional_kwargs.get("files") or []:
        name = entry.get("filename") if isinstance(entry, dict) else entry
        if not isinstance(name, str) or not name or posixpath.basename(name) != name or "\\" in name:
            continue
        if name not in (".", "..") and not is_upload_staging_file(name):
            names.append(name)
    return names


def format_size(size: int) -> str:
    kb = size / 1024
    return f"{kb:.1f} KB" if kb < 1024 else f"{kb / 1024:.1f} MB"


def files_message(listed: list[UploadedFile], omitted: list[UploadedFile]) -> str:
    """The ``<current_uploads>`` envelope, worded exactly as DeerFlow's."""
    lines = ["<current_uploads>", "The following files were uploaded in this message:", ""]
    if not listed:
        lines += ["(empty)", ""]
    for file in listed:
        lines += [
            f"- {neutralize_untrusted_tags(file.filename)} ({format_size(file.size)})",
            f"  Path: {neutralize_untrusted_tags(f'{VIRTUAL_UPLOADS_DIR}/{file.filename}')}",
        ]
        if file.outline:
            lines.append("  Document outline (use `read_file` with line ranges to read sections):")
            lines += [f"    L{entry.line}: {neutralize_untrusted_tags(entry.title)}" for entry in file.outline]
            if file.outline_truncated:
                lines.append(
                    f"    ... (showing first {len(file.outline)} headings; use `read_file` to explore further)"
                )
        else:
            if file.outline_preview:
                lines.append("  No structural headings detected. Document begins with:")
                lines += [f"    > {neutralize_untrusted_tags(text)}" for text in file.outline_preview]
            lines.append(f"  Use `grep` to search for keywords (e.g. `{_SEARCH_HINT}`).")
        lines.append("")
    if listed and omitted:
        lines += [
            f"... ({len(omitted)} more file(s) from this message omitted from this context.)",
            f"  Omitted file types: {omitted_types(omitted)}",
            f"  Use `glob(pattern='**/*', path='{VIRTUAL_UPLOADS_DIR}/')` to list all uploads.",
            f"  Use `{_SEARCH_HINT}` to search across uploads.",
            "",
        ]
    lines += [
        "To work with these files:",
        "- Read from the file first — use the outline line numbers and `read_file` to locate relevant sections.",
        "- Use `grep` to search for keywords when you are not sure which section to look at",
        f"  (e.g. `grep(pattern='revenue', path='{VIRTUAL_UPLOADS_DIR}/')`).",
        "- Use `glob` to find files by name pattern",
        f"  (e.g. `glob(pattern='**/*.md', path='{VIRTUAL_UPLOADS_DIR}/')`).",
        "- Only fall back to web search if the file content is clearly insufficient to answer the question.",
        "</current_uploads>",
    ]
    return "\n".join(lines)


def omitted_types(files: list[UploadedFile]) -> str:
    """``2 .csv, 1 .pdf``: counts by lower-cased extension, sorted by extension."""
    counts = Counter(
        neutralize_untrusted_tags(PurePosixPath(f.filename).suffix.lower()) or "(no extension)" for f in files
    )
    return neutralize_untrusted_tags(", ".join(f"{count} {ext}" for ext, count in sorted(counts.items())))


def file_record(file: UploadedFile) -> dict[str, Any]:
    """An ``uploaded_files`` entry (DeerFlow's keys)."""
    return {
        "filename": file.filename,
        "size": file.size,
        "path": f"{VIRTUAL_UPLOADS_DIR}/{file.filename}",
        "extension": PurePosixPath(file.filename).suffix,
    }


def with_envelope(message: HumanMessage, envelope: str) -> HumanMessage:
    """``message`` with ``envelope`` prepended (same id and name) and its original text remembered."""
    kwargs = dict(message.additional_kwargs)
    if not isinstance(kwargs.get(ORIGINAL_USER_CONTENT_KEY), str):
        kwargs[ORIGINAL_USER_CONTENT_KEY] = message_text(message)
    content: Any = message.content
    if isinstance(content, str):
        content = f"{envelope}\n\n{content}"
    else:
        content = [{"type": "text", "text": f"{envelope}\n\n"}, *content]
    return message.model_copy(update={"content": content, "additional_kwargs": kwargs})


class UploadsMiddleware(Middleware):
    def __init__(self, config: UploadsConfig | None = None) -> None:
        self.config = config or UploadsConfig()

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, HumanMessage) or not (names := attached_filenames(last)):
            return {"uploaded_files": []}
        cap = self.config.max_files_per_context_section
        found = await call_activity(
            ctx,
            UPLOADS_LIST,
            UploadsListInput(ctx.thread, names, outline_limit=cap),
            summary=f"Uploads.before_agent · look up {len(names)} attached file(s)",
            options=ActivityOptions(local=True),
        )
        if not found.files:
            return {"uploaded_files": []}
        envelope = files_message(found.files[:cap], found.files[cap:])
        return {
            "uploaded_files": [file_record(f) for f in found.files],
            "messages": [with_envelope(last, envelope)],
        }
