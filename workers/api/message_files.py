"""The files a run's message carries: DeerFlow's app uploads them first (``POST /threads/{id}/uploads``), then
sends the human message with ``additional_kwargs.files`` = ``[{filename, size, path, status}]``
(``bytedance/deer-flow: frontend/src/core/threads/hooks.ts``, ``buildThreadSubmitMessages``).

They reach the run as the CLI's ``hartflow run --file`` does (``RunStart.files``: the names), so the Uploads
middleware (``middlewares/uploads.py``) tells the model where they are; the message keeps one entry per file
(``RunStart.file_entries``) for the app's file cards. Each entry is written here from storage, never copied from
the request: ``filename``, its ``size`` in storage, ``path`` (its virtual path) and ``status: "uploaded"``.

A name must be an upload of this thread: a plain file name (``activities/uploads.py``, so no path traversal) of
a file in the caller's own uploads folder, else 422 before anything is written. An entry may also be a bare
name (what the CLI's runs store).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import HTTPException

from activities.thread_files import PathEscapeError
from activities.uploads import UploadError, validate_upload_name
from vocabulary.contracts import ThreadRef
from vocabulary.paths import VIRTUAL_UPLOADS_DIR
from workers.api.deps import ApiContext
from workers.api.files import thread_files

MAX_ATTACHED_FILES = 100
"""Files one message may name (the app sends one upload request's worth: ``api.uploads.max_files``)."""


def attached_names(message: dict[str, Any] | None) -> list[str]:
    """The upload names ``message`` carries, checked for their shape (422 otherwise), in order, once each."""
    files = ((message or {}).get("additional_kwargs") or {}).get("files")
    if files is None:
        return []
    if not isinstance(files, list):
        raise HTTPException(422, "additional_kwargs.files must be a list of {filename, ...} entries")
    if len(files) > MAX_ATTACHED_FILES:
        raise HTTPException(422, f"additional_kwargs.files names {len(files)} files; at most {MAX_ATTACHED_FILES}")
    names: list[str] = []
    for index, entry in enumerate(files):
        name = entry.get("filename") if isinstance(entry, dict) else entry
        if not isinstance(name, str):
            raise HTTPException(422, f"additional_kwargs.files[{index}]: a file entry needs a filename (text)")
        try:
            validate_upload_name(name)
        except UploadError as exc:
            raise HTTPException(422, f"additional_kwargs.files[{index}]: {exc}") from None
        if name not in names:
            names.append(name)
    return names


def _entries(context: ApiContext, thread: ThreadRef, names: list[str]) -> list[dict[str, Any]]:
    files = thread_files(context)
    entries = []
    for name in names:
        virtual = f"{VIRTUAL_UPLOADS_DIR}/{name}"
        try:
            info = files.info(thread, virtual)
        except PathEscapeError:
            info = None  # a link in the uploads folder is no upload (the filesystem backend refuses to follow it)
        if info is None or info.is_dir:
            raise HTTPException(
                422, f"additional_kwargs.files: {name!r} is not an upload of thread {thread.thread_id}; upload it first"
            )
        entries.append({"filename": name, "size": info.size, "path": virtual, "status": "uploaded"})
    return entries


async def attached_files(
    context: ApiContext, thread: ThreadRef, message: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """DeerFlow's entries for the uploads ``message`` names, read from storage; 422 for a name that is not one."""
    names = attached_names(message)
    if not names:
        return []
    return await asyncio.to_thread(_entries, context, thread, names)
