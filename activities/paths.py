"""Where a thread's files live on the host, and the id rules that keep those paths safe.

Layout (DeerFlow's user-scoped layout, rooted at the hartflow home instead of ``.deer-flow``)::

    {home}/users/{user_id}/threads/{thread_id}/user-data/{workspace,uploads,outputs}
    {home}/users/{user_id}/threads/{thread_id}/state.json        (filesystem thread store)

Inside a sandbox the same folders appear under ``/mnt/user-data``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

THREAD_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
USER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_\-]+$")
VIRTUAL_PATH_PREFIX = "/mnt/user-data"
USER_DATA_DIRS = ("workspace", "uploads", "outputs")


class InvalidIdError(ValueError):
    """A thread or user id that would not make a safe path segment."""


def validate_thread_id(thread_id: str) -> str:
    if not isinstance(thread_id, str) or not THREAD_ID_PATTERN.match(thread_id):
        raise InvalidIdError(
            f"invalid thread id {thread_id!r}: use 1-64 characters from A-Z, a-z, 0-9, '_' and '-'"
        )
    return thread_id


def validate_user_id(user_id: str) -> str:
    if not isinstance(user_id, str) or not USER_ID_PATTERN.match(user_id) or len(user_id) > 128:
        raise InvalidIdError(f"invalid user id {user_id!r}: use characters from A-Z, a-z, 0-9, '_' and '-'")
    return user_id


@dataclass(frozen=True)
class ThreadPaths:
    home: Path
    user_id: str
    thread_id: str

    def __post_init__(self) -> None:
        validate_user_id(self.user_id)
        validate_thread_id(self.thread_id)

    @property
    def thread_dir(self) -> Path:
        return self.home / "users" / self.user_id / "threads" / self.thread_id

    @property
    def user_data(self) -> Path:
        return self.thread_dir / "user-data"

    @property
    def workspace(self) -> Path:
        return self.user_data / "workspace"

    @property
    def uploads(self) -> Path:
        return self.user_data / "uploads"

    @property
    def outputs(self) -> Path:
        return self.user_data / "outputs"

    @property
    def state_file(self) -> Path:
        return self.thread_dir / "state.json"

    def ensure_dirs(self) -> None:
        for name in USER_DATA_DIRS:
            path = self.user_data / name
            path.mkdir(parents=True, exist_ok=True)
            # The sandbox may run as another uid (DeerFlow chmods these 0o777 for the same reason).
            path.chmod(0o777)
