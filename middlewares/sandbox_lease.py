"""What a run knows of its thread's sandbox: the :class:`SandboxLease` the Sandbox middleware owns
(``middlewares/sandbox.py``) and hands down each tool call's request (``ToolCallRequest.sandbox``), so the engine's
tool executor and delegation (``workflows/run/tools.py``, ``delegate.py``) use and report the id in one place.

Thread state may name a sandbox too (``{"sandbox": {"sandbox_id": …}}``, written by Sandbox). Providers derive the
id from the thread, so the two agree whenever both are set; which one wins is kept as it always was: a tool call
prefers the id this run learnt, the release prefers the state's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vocabulary.state import ThreadState


@dataclass
class SandboxLease:
    sandbox_id: str | None = None
    """The sandbox a tool of this run acquired or used (DeerFlow's ``runtime.context["sandbox_id"]``), the one
    the eager acquire returned, or the one the run's previous execution carried across continue-as-new."""
    unreported: bool = False
    """A sandbox tool activity (or a subagent) started while no sandbox id was known and no id came back: it may
    have created the thread's sandbox (a tool reports the id only when it returns, a subagent never), so the run
    releases by thread."""
    needs_release: bool = True
    """False once a tool reported that the provider of :attr:`sandbox_id` holds nothing a release would free."""

    def for_call(self, state: ThreadState) -> Any:
        """The id a tool call (or a subagent) works in: this run's, else the state's; ``None`` when neither."""
        return self.sandbox_id or (state.sandbox or {}).get("sandbox_id")

    def starting(self, sandbox_id: str | None) -> None:
        """A call that may acquire a sandbox starts with ``sandbox_id``: without one it may leave one unreported
        (a cancellation or failure may end it before an id comes back)."""
        if sandbox_id is None:
            self.unreported = True

    def reported(self, sandbox_id: str | None, *, needs_release: bool = True) -> None:
        """A call came back naming the sandbox it used (``None``: it named none, and nothing changes), and whether
        its provider holds anything a release would free."""
        if sandbox_id:
            self.sandbox_id = sandbox_id
            self.unreported = False
            self.needs_release = needs_release
