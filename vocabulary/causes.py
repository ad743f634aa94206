"""Why a workflow, an update or an activity failed, as a client reports it: the end of the failure's ``.cause``.

Temporal hands a client the failure wrapped in whatever carried it (``WorkflowUpdateFailedError`` → the
``ApplicationError`` the workflow raised → the activity's error ...); the reason a person should read, and the
error type a client tells apart, are at the end of that chain. (The run workflow reads its own failures with
``workflows/run/view.py``: workflow code imports nothing from ``workers/``.)
"""

from __future__ import annotations


def root_cause(exc: BaseException) -> BaseException:
    """The last failure of ``exc``'s ``.cause`` chain (``exc`` itself when it has none)."""
    while isinstance(cause := getattr(exc, "cause", None), BaseException):
        exc = cause
    return exc


def root_message(exc: BaseException) -> str:
    """The root failure's own message (an ``ApplicationError``'s ``message``, without the type Temporal adds)."""
    root = root_cause(exc)
    return str(getattr(root, "message", None) or root)


def root_type(exc: BaseException) -> str | None:
    """The root failure's error type, as the workflow named it (``ApplicationError.type``), or ``None``."""
    kind = getattr(root_cause(exc), "type", None)
    return kind if isinstance(kind, str) else None
