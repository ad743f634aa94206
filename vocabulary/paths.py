"""The layout of a thread's files and the id rules that keep it safe — pure, so hooks and activities share it.

Layout (DeerFlow's user-scoped layout, relative to the hartflow storage home)::

    users/{user_id}/threads/{thread_id}/user-data/{workspace,uploads,outputs}

Inside a sandbox the same folders appear under ``/mnt/user-data``. Only activities know the home on their
host (``activities/paths.py``); workflow code works with home-relative paths and virtual paths.
"""

from __future__ import annotations

import re

# Matched with fullmatch: with match, "$" would also accept a trailing newline ("t1\n").
THREAD_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
USER_ID_PATTERN = re.compile(r"[A-Za-z0-9_\-]+")
VIRTUAL_PATH_PREFIX = "/mnt/user-data"
USER_DATA_DIRS = ("workspace", "uploads", "outputs")
VIRTUAL_UPLOADS_DIR = f"{VIRTUAL_PATH_PREFIX}/uploads"
VIRTUAL_OUTPUTS_DIR = f"{VIRTUAL_PATH_PREFIX}/outputs"
UPLOAD_STAGING_PREFIX, UPLOAD_STAGING_SUFFIX = ".upload-", ".part"


class InvalidIdError(ValueError):
    """A thread or user id that would not make a safe path segment."""


def validate_thread_id(thread_id: str) -> str:
    if not isinstance(thread_id, str) or not THREAD_ID_PATTERN.fullmatch(thread_id):
        raise InvalidIdError(f"invalid thread id {thread_id!r}: use 1-64 characters from A-Z, a-z, 0-9, '_' and '-'")
    return thread_id


def validate_user_id(user_id: str) -> str:
    if not isinstance(user_id, str) or not USER_ID_PATTERN.fullmatch(user_id) or len(user_id) > 128:
        raise InvalidIdError(f"invalid user id {user_id!r}: use characters from A-Z, a-z, 0-9, '_' and '-'")
    return user_id


def is_upload_staging_file(name: str) -> bool:
    """A half-written upload (``.upload-*.part``): the writer renames it once it is complete."""
    return name.startswith(UPLOAD_STAGING_PREFIX) and name.endswith(UPLOAD_STAGING_SUFFIX)


def thread_dir(user_id: str, thread_id: str) -> str:
    """The thread's folder relative to the storage home, after validating both ids."""
    return f"users/{validate_user_id(user_id)}/threads/{validate_thread_id(thread_id)}"


def user_data_dirs(user_id: str, thread_id: str) -> dict[str, str]:
    """``{workspace,uploads,outputs}_path`` relative to the storage home (DeerFlow's ``thread_data`` keys)."""
    base = f"{thread_dir(user_id, thread_id)}/user-data"
    return {f"{name}_path": f"{base}/{name}" for name in USER_DATA_DIRS}
