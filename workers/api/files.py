"""A thread's uploads and artifacts over HTTP, in the shapes DeerFlow's frontend reads.

- ``POST /threads/{id}/uploads`` (multipart field ``files``, one or more) → ``{success, files, message}``;
  ``GET /threads/{id}/uploads/list`` → ``{files, count}``; ``DELETE /threads/{id}/uploads/{name}`` →
  ``{success, message}``; ``GET /threads/{id}/uploads/limits`` → ``{max_files, max_file_size, max_total_size}``
  (``api.uploads``, also for a thread id not used yet: the app asks before a new chat's first upload; a request
  over them is 413 with DeerFlow's words, nothing stored). Each file is ``{filename, size, path, virtual_path,
  extension, modified}`` with ``path`` = ``virtual_path`` = ``/mnt/user-data/uploads/{name}``, what the model sees
  (``bytedance/deer-flow: backend/app/gateway/routers/uploads.py`` has the same fields; hartflow serves no host
  path).
- ``GET /threads/{id}/artifacts/{path}``: a file the run wrote under ``outputs``, addressed as DeerFlow's
  frontend does (the virtual path without its leading slash: ``mnt/user-data/outputs/report.md``) or relative
  to the outputs folder (``report.md``). ``?download=true`` answers it as an attachment. The content type
  follows the extension; active content (HTML, SVG, XML) is sandboxed by a CSP so a generated page cannot run
  script as the API's origin.

The rules are the CLI's, from one place: thread ids (``deps.path_thread`` → ``vocabulary/paths.py``), upload
names (``activities/uploads.py``), virtual paths and symlinks (``activities/thread_files.py``; on the filesystem
backend no folder or file is reached through a link, also not a linked ``outputs``/``uploads``/``user-data``:
``activities/no_follow.py``). Every
name of a request is checked before the first write, so bad input writes nothing; another user's thread is
not found (404), and every key is under the caller's own ``users/{user_id}/``. Uploads may precede the thread
(DeerFlow's frontend uploads a new chat's files before the run that creates it): any thread id takes uploads
into the caller's own folder, whether or not another user has a thread of that name, so the answer tells
nothing about other users' threads (their runs are other workflows too, ``vocabulary/workflow_ids.py``).
"""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import PurePosixPath
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, HTTPException, UploadFile
from starlette.responses import Response

from activities.thread_files import PathEscapeError, ThreadFiles, user_data_relative
from activities.thread_store import ObjectThreadStore
from activities.uploads import UploadError, upload_key, validate_upload_name
from vocabulary.contracts import ThreadRef
from vocabulary.paths import VIRTUAL_OUTPUTS_DIR, VIRTUAL_PATH_PREFIX, VIRTUAL_UPLOADS_DIR, is_upload_staging_file
from workers.api.deps import ApiContext, api, path_thread
from workers.api.ledger import existing_record
from workers.api_settings import UploadLimits

router = APIRouter()
CallerThread = Annotated[ThreadRef, Depends(path_thread)]
Context = Annotated[ApiContext, Depends(api)]

_ACTIVE_CONTENT = ("text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml")
_VIRTUAL_ROOT = VIRTUAL_PATH_PREFIX.lstrip("/") + "/"


def thread_files(context: ApiContext) -> ThreadFiles:
    return ThreadFiles(context.objects, context.config.home)


def _has_objects(context: ApiContext, thread: ThreadRef) -> bool:
    return next(iter(context.objects.list(ObjectThreadStore.thread_prefix(thread))), None) is not None


def _is_callers(context: ApiContext, thread: ThreadRef) -> bool:
    """The caller made this thread, or already uploaded to it before its first run."""
    return existing_record(context.objects, context.store, thread) is not None or _has_objects(context, thread)


def require_callers(context: ApiContext, thread: ThreadRef) -> None:
    if not _is_callers(context, thread):
        raise HTTPException(404, f"thread {thread.thread_id} not found")


def _entry(name: str, size: int, modified: float | None) -> dict[str, Any]:
    virtual = f"{VIRTUAL_UPLOADS_DIR}/{name}"
    suffix = PurePosixPath(name).suffix
    return {
        "filename": name,
        "size": size,
        "path": virtual,
        "virtual_path": virtual,
        "extension": suffix.lower() or None,
        "modified": modified,
    }


def _checked_names(files: list[UploadFile]) -> list[str]:
    names: list[str] = []
    for file in files:
        try:
            name = validate_upload_name(file.filename or "")
        except UploadError as exc:
            raise HTTPException(422, str(exc)) from None
        if name in names:
            raise HTTPException(422, f"two files are named {name!r}")
        names.append(name)
    return names


def _store(files: ThreadFiles, thread: ThreadRef, name: str, data: bytes) -> None:
    """One upload, atomically. On the filesystem the write refuses a symlink out of the thread's folders; on S3
    it goes straight to storage (a worker's working copy pulls it before its next tool call)."""
    if files.uses_working_copy:
        files.store.put(upload_key(thread, name), data)
    else:
        files.write(thread, f"{VIRTUAL_UPLOADS_DIR}/{name}", data)


def save_uploads(context: ApiContext, thread: ThreadRef, uploads: list[tuple[str, bytes]]) -> None:
    files = thread_files(context)
    for name, data in uploads:
        _store(files, thread, name, data)


def _within_limits(limits: UploadLimits, uploads: list[tuple[str, bytes]]) -> None:
    if len(uploads) > limits.max_files:
        raise HTTPException(413, f"Too many files: maximum is {limits.max_files}")
    for name, data in uploads:
        if len(data) > limits.max_file_size:
            raise HTTPException(413, f"File too large: {name}")
    if sum(len(data) for _, data in uploads) > limits.max_total_size:
        raise HTTPException(413, "Total upload size too large")


@router.post("/threads/{thread_id}/uploads")
async def upload_files(
    files: Annotated[list[UploadFile], File()], thread: CallerThread, context: Context
) -> dict[str, Any]:
    if not files:
        raise HTTPException(422, "no files in the request (multipart field 'files')")
    names = _checked_names(files)
    uploads = [(name, await file.read()) for name, file in zip(names, files, strict=True)]
    _within_limits(context.config.api.uploads, uploads)
    try:
        await asyncio.to_thread(save_uploads, context, thread, uploads)
    except PathEscapeError as exc:
        raise HTTPException(400, str(exc)) from None
    stored = [_entry(name, len(data), None) for name, data in uploads]
    return {"success": True, "files": stored, "message": f"uploaded {len(stored)} file(s)"}


def _uploads_prefix(thread: ThreadRef) -> str:
    return ThreadFiles.prefix(thread) + "uploads/"


def _list_uploads(context: ApiContext, thread: ThreadRef) -> list[dict[str, Any]]:
    require_callers(context, thread)
    prefix = _uploads_prefix(thread)
    listed = []
    for info in context.objects.list(prefix):
        name = info.key[len(prefix) :]
        if "/" in name or is_upload_staging_file(name):
            continue  # a folder the model made, or an upload still being written
        listed.append(_entry(name, info.size, info.modified.timestamp()))
    return listed


@router.get("/threads/{thread_id}/uploads/limits")
async def upload_limits(thread: CallerThread, context: Context) -> dict[str, int]:
    """``api.uploads``, the sizes capped by ``api.max_body_bytes`` (a larger request never reaches the route)."""
    limits, body = context.config.api.uploads, context.config.api.max_body_bytes
    return {
        "max_files": limits.max_files,
        "max_file_size": min(limits.max_file_size, body),
        "max_total_size": min(limits.max_total_size, body),
    }


@router.get("/threads/{thread_id}/uploads/list")
async def list_uploads(thread: CallerThread, context: Context) -> dict[str, Any]:
    listed = await asyncio.to_thread(_list_uploads, context, thread)
    return {"files": listed, "count": len(listed)}


def _delete_upload(context: ApiContext, thread: ThreadRef, name: str) -> None:
    require_callers(context, thread)
    files = thread_files(context)
    info = files.info(thread, f"{VIRTUAL_UPLOADS_DIR}/{name}")  # on the filesystem: refuses a symlink escape
    if info is None or info.is_dir:
        raise HTTPException(404, f"upload {name!r} not found")
    files.store.delete(upload_key(thread, name))


@router.delete("/threads/{thread_id}/uploads/{name}")
async def delete_upload(name: str, thread: CallerThread, context: Context) -> dict[str, Any]:
    try:
        validate_upload_name(name)
        await asyncio.to_thread(_delete_upload, context, thread, name)
    except UploadError as exc:
        raise HTTPException(422, str(exc)) from None
    except PathEscapeError as exc:
        raise HTTPException(400, str(exc)) from None
    return {"success": True, "message": f"deleted {name}"}


def output_virtual_path(path: str) -> str:
    """The artifact ``path`` of the URL as a checked virtual path under outputs (400/403 otherwise)."""
    virtual = "/" + path if path.startswith(_VIRTUAL_ROOT) else f"{VIRTUAL_OUTPUTS_DIR}/{path}"
    try:
        relative = user_data_relative(virtual)
    except PathEscapeError as exc:
        raise HTTPException(400, f"invalid artifact path {path!r}: {exc}") from None
    if not relative.startswith("outputs/"):
        raise HTTPException(403, f"only files under {VIRTUAL_OUTPUTS_DIR} are served as artifacts, not {path!r}")
    return virtual


def _read_artifact(context: ApiContext, thread: ThreadRef, virtual: str) -> bytes | None:
    require_callers(context, thread)
    return thread_files(context).read(thread, virtual)


def _headers(name: str, media_type: str, download: bool) -> dict[str, str]:
    disposition = "attachment" if download else "inline"
    headers = {
        "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(name, safe='')}",
        "X-Content-Type-Options": "nosniff",
    }
    if media_type in _ACTIVE_CONTENT:
        headers["Content-Security-Policy"] = "sandbox"
    return headers


@router.get("/threads/{thread_id}/artifacts/{path:path}")
async def get_artifact(path: str, thread: CallerThread, context: Context, download: bool = False) -> Response:
    virtual = output_virtual_path(path)
    try:
        data = await asyncio.to_thread(_read_artifact, context, thread, virtual)
    except PathEscapeError as exc:
        raise HTTPException(400, f"invalid artifact path {path!r}: {exc}") from None
    if data is None:
        raise HTTPException(404, f"artifact {path!r} not found")
    name = PurePosixPath(virtual).name
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Response(data, media_type=media_type, headers=_headers(name, media_type, download))
