"""Logging from hooks.

Hooks run in workflow code, which Temporal replays from history whenever a worker rebuilds a run: a plain
logger would repeat each line on every replay. :class:`HookLogger` stays silent while history is replayed
(as ``workflow.logger`` does), so an audit line appears once per decision; unlike ``workflow.logger`` it also
works outside a workflow, where unit tests call hooks directly, and it leaves the message text untouched so
structured lines such as ``[SandboxAudit] {json}`` stay parseable.
"""

from __future__ import annotations

import logging

from temporalio import workflow


class HookLogger(logging.LoggerAdapter[logging.Logger]):
    def isEnabledFor(self, level: int) -> bool:
        if workflow.in_workflow() and workflow.unsafe.is_replaying_history_events():
            return False
        return super().isEnabledFor(level)


def hook_logger(name: str) -> HookLogger:
    return HookLogger(logging.getLogger(name))
