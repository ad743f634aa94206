"""Where a thread's files live on this host: the pure layout (``vocabulary/paths.py``) rooted at the home.

Layout (DeerFlow's user-scoped layout, rooted at the hartflow home instead of ``.deer-flow``)::

    {home}/users/{user_id}/threads/{thread_id}/user-data/{workspace,uploads,outputs}
    {home}/users/{user_id}/threads/{thread_id}/state/v{N}.json   (the thread store on the filesystem backend)

Inside a sandbox the same folders appear under ``/mnt/user-data``.

The home is the operator's; everything below it may have been touched by a run (host bash, an MCP tool), so the
folders are created without following a link on the way (``activities/no_follow.py``): a thread folder,
``user-data`` or one of the three replaced by a symlink is refused, never created through or ``chmod``-ed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from activities import no_follow
from vocabulary.paths import (
    USER_DATA_DIRS,
    VIRTUAL_PATH_PREFIX,
    InvalidIdError,
    thread_dir,
    validate_thread_id,
    validate_user_id,
)

# Re-exported: the sandbox and the CLI name the layout through this module.
__all__ = [
    "USER_DATA_DIRS",
    "VIRTUAL_PATH_PREFIX",
    "InvalidIdError",
    "ThreadPaths",
    "validate_thread_id",
    "validate_user_id",
]


@dataclass(frozen=True)
class ThreadPaths:
    home: Path
    user_id: str
    thread_id: str

    def __post_init__(self) -> None:
        thread_dir(self.user_id, self.thread_id)  # validates both ids

    @property
    def anchor(self) -> Path:
        """The trusted folder the thread's folders are below: nothing under it is followed if a link."""
        return self.home

    @property
    def thread_dir(self) -> Path:
        return self.home / thread_dir(self.user_id, self.thread_id)

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

    def ensure_dirs(self) -> None:
        """Create the three folders; :class:`~activities.no_follow.PathEscapeError` when a folder from the home
        down is a symlink (nothing is created or ``chmod``-ed through it)."""
        for name in USER_DATA_DIRS:
            below = f"{thread_dir(self.user_id, self.thread_id)}/user-data/{name}"
            with no_follow.opened_dir(self.home, below, create=True) as folder:
                # The sandbox may run as another uid (DeerFlow chmods these 0o777 for the same reason).
                os.fchmod(folder, 0o777)
