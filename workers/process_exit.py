"""``hard_exit``: how the CLI and the benchmarks end a process that ran a Temporal ``Worker``."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def hard_exit(code: int) -> NoReturn:
    """Flush output and leave with ``os._exit(code)``, skipping interpreter finalization.

    Workaround for temporalio/sdk-python#300 (open): a process that ran a `Worker` sometimes dies *after* its
    work is done with ``Fatal Python error: PyGILState_Release`` (exit 134, once 139) while the interpreter
    finalizes, turning a success into a CI failure. ``os._exit`` skips finalization, so nothing after this
    call runs: no atexit hooks, no ``finally`` blocks; hence the explicit flush of logging and std streams.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
