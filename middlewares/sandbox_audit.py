"""SandboxAudit: every ``bash`` call is classified and audited before it can reach the sandbox.

Defence in depth and an audit trail, not a security boundary (the sandbox is the boundary): the rules are
DeerFlow's regexes and its heuristic (not a shell parser) splitting, kept identical because the verdicts
are part of the protocol users see.

Hook
* ``wrap_tool_call`` (``bash`` only; other tools pass through):
  - input validation — empty/whitespace, longer than 10,000 characters, or a NUL byte ⇒ block;
  - classification — pass 1 scans the whole whitespace-normalised command with the high-risk rules (keeps
    multi-statement shapes such as fork bombs intact); pass 2 splits it on ``;``, ``&&``, ``||``, ``|`` and
    unquoted newlines (``middlewares/_shell_split.py``: heredoc bodies stay data, ``<<<`` and arithmetic
    ``<<`` open no heredoc) and checks each sub-command with the high-risk rules, the anchored
    command-position substitution rules (issue #4611: ``$(curl …)`` as the command blocks, ``x=$(curl …)`` /
    ``echo $(curl …)`` pass), a shlex-joined re-check, then the medium-risk rules. The worst verdict wins.
  - block ⇒ ``ToolMessage("Command blocked: {reason}. Please use a safer alternative approach.",
    status="error")`` and the tool never runs; warn ⇒ the tool runs and the result gets the medium-risk
    warning appended; pass ⇒ the tool runs.

Writes: the tool result (thread state, through the run) and, for every bash call, an audit record — a
``[SandboxAudit] {json}`` log line on the worker (logger ``middlewares.sandbox_audit``) and a
``sandbox_audit`` progress event on the run (the ``events`` query) — both side effects of the workflow itself.

Parts: none outside this module (helpers: ``middlewares/_shell_split.py``); tests: ``tests/test_sandbox_audit.py``,
``tests/test_shell_split.py``.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Literal

from langchain_core.messages import ToolMessage

from middlewares._logging import hook_logger
from middlewares._shell_split import split_compound_command
from middlewares.base import Middleware, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import RunContext

logger = hook_logger(__name__)

Verdict = Literal["block", "warn", "pass"]

TOOL_NAME = "bash"
MAX_COMMAND_LENGTH = 10_000
"""Far above any legitimate command, a tiny fraction of ARG_MAX: longer ones are payload injections."""
AUDIT_COMMAND_LIMIT = 200
"""Rejected inputs are logged truncated so an oversized payload cannot amplify the log."""
BLOCK_REASON = "security violation detected"

# -- classification rules (DeerFlow's, verbatim) ---------------------------------------------------------

# Executables whose output is dangerous to *execute*; ``\b`` keeps ``shellcheck`` or ``pythonic-tool`` out.
_RISKY_SUBSTITUTION_EXECUTABLES = r"(?:curl|wget|bash|sh|python[\d.]*|ruby|perl|base64)\b"
# A substitution opening one of them in any spelling: ``$(cmd``, ``<(cmd`` or backticks. One shared opener
# keeps ``eval `curl u` `` from slipping past a rule written for ``eval $(curl u)``.
_RISKY_SUBSTITUTION = rf"(?:[$<]\(\s*|`\s*){_RISKY_SUBSTITUTION_EXECUTABLES}"
# Interpreters executing a code string passed with -c/-e/-p/-r (or through a here-string): a risky
# substitution there is executed wherever it appears (``xargs sh -c "$(curl url)"``), like eval's argument.
_CODE_STRING_INTERPRETERS = r"(?:(?:ba|da|k|z)?sh|python[\d.]*|perl|ruby|node|php)"
_LEADING_FLAGS = r"(?:-\w+\s+){0,4}"

_HIGH_RISK_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"rm\s+-[^\s]*r[^\s]*\s+(/\*?|~/?\*?|/home\b|/root\b)\s*$"),
    re.compile(r"dd\s+if="),
    re.compile(r"mkfs"),
    re.compile(r"cat\s+/etc/shadow"),
    re.compile(r">+\s*/etc/"),
    re.compile(r"\|\s*(ba)?sh\b"),
    re.compile(rf"\b(eval|source)\s+[\"']?{_RISKY_SUBSTITUTION}"),
    re.compile(rf"\b{_CODE_STRING_INTERPRETERS}\s+{_LEADING_FLAGS}-[cepr]\s+[\"']?{_RISKY_SUBSTITUTION}"),
    re.compile(rf"\b{_CODE_STRING_INTERPRETERS}\s+{_LEADING_FLAGS}<<<\s*[\"']?{_RISKY_SUBSTITUTION}"),
    re.compile(r"base64\s+.*-d.*\|"),
    re.compile(r">+\s*(/usr/bin/|/bin/|/sbin/)"),
    re.compile(r">+\s*~/?\.(bashrc|profile|zshrc|bash_profile)"),
    re.compile(r"/proc/[^/]+/environ"),
    re.compile(r"\b(LD_PRELOAD|LD_LIBRARY_PATH)\s*="),
    re.compile(r"/dev/tcp/"),
    re.compile(r"\S+\(\)\s*\{[^}]*\|\s*\S+\s*&"),  # fork bomb :(){ :|:& };:
    re.compile(r"while\s+true.*&\s*done"),  # while true; do bash & done
)

# A substitution in *command position* runs what it produced. Matched anchored against one sub-command, so
# position decides: ``$(curl u)`` blocks, ``x=$(curl u)`` and ``echo $(curl u)`` pass (issue #4611). Leading
# assignments and exec wrappers keep the command position (``FOO=1 $(curl u)``, ``nohup $(curl u)``); the
# assignment branch needs whitespace before the substitution, so ``x=$(curl u)`` stays a value. Bounded
# repetition keeps the alternation from backtracking on long input.
_COMMAND_POSITION_PREFIX = r"(?:(?:env|command|builtin|exec|nohup|time|sudo|doas)\s+|\w+=\S*\s+){0,8}"
_HIGH_RISK_COMMAND_POSITION_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(rf"^{_COMMAND_POSITION_PREFIX}[\"']?\$\(\s*{_RISKY_SUBSTITUTION_EXECUTABLES}"),
    re.compile(rf"^{_COMMAND_POSITION_PREFIX}[\"']?`\s*{_RISKY_SUBSTITUTION_EXECUTABLES}"),
)

_MEDIUM_RISK_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"chmod\s+777"),
    re.compile(r"pip3?\s+install"),
    re.compile(r"apt(-get)?\s+install"),
    re.compile(r"\b(sudo|su)\b"),  # a no-op as root in a container; warn so the model knows
    re.compile(r"\bPATH\s*="),  # a long attack chain: warn rather than block
)


def _matches_high_risk(candidate: str) -> bool:
    if any(pattern.search(candidate) for pattern in _HIGH_RISK_PATTERNS):
        return True
    # Anchored rules only mean something for a single sub-command.
    return any(pattern.match(candidate) for pattern in _HIGH_RISK_COMMAND_POSITION_PATTERNS)


def _classify_single_command(command: str) -> Verdict:
    normalized = " ".join(command.split())
    if _matches_high_risk(normalized):
        return "block"
    # Quotes removed: ``"rm" -rf /`` is ``rm -rf /``.
    try:
        if _matches_high_risk(" ".join(shlex.split(command))):
            return "block"
    except ValueError:
        pass  # heredocs and other multi-line forms shlex cannot parse: the raw scan above already ran
    if any(pattern.search(normalized) for pattern in _MEDIUM_RISK_PATTERNS):
        return "warn"
    return "pass"


def classify_command(command: str) -> Verdict:
    """``block``, ``warn`` or ``pass`` for a whole bash command."""
    normalized = " ".join(command.split())
    if any(pattern.search(normalized) for pattern in _HIGH_RISK_PATTERNS):
        return "block"
    worst: Verdict = "pass"
    for sub in split_compound_command(command, split_pipes=True):
        verdict = _classify_single_command(sub)
        if verdict == "block":
            return "block"
        if verdict == "warn":
            worst = "warn"
    return worst


def validate_input(command: str) -> str | None:
    """The rejection reason for malformed input, or ``None``."""
    if not command.strip():
        return "empty command"
    if len(command) > MAX_COMMAND_LENGTH:
        return "command too long"
    if "\x00" in command:
        return "null byte detected"
    return None


# -- the middleware ----------------------------------------------------------------------------------------


class SandboxAuditMiddleware(Middleware):
    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        if request.name != TOOL_NAME:
            return await handler(request)
        args = request.args if isinstance(request.args, dict) else {}
        command = args.get("command")
        command = command if isinstance(command, str) else ""
        ctx = request.ctx

        rejection = validate_input(command)
        if rejection is not None:
            self._audit(ctx, command, "block", truncate=True)
            logger.warning("[SandboxAudit] INVALID INPUT thread=%s reason=%s", ctx.thread_id, rejection)
            return blocked_message(request, rejection)

        verdict = classify_command(command)
        self._audit(ctx, command, verdict)
        if verdict == "block":
            logger.warning("[SandboxAudit] BLOCKED thread=%s cmd=%r", ctx.thread_id, command)
            return blocked_message(request, BLOCK_REASON)
        if verdict == "pass":
            return await handler(request)
        logger.warning("[SandboxAudit] WARN (medium-risk) thread=%s cmd=%r", ctx.thread_id, command)
        return with_warning(await handler(request), command)

    @staticmethod
    def _audit(ctx: RunContext, command: str, verdict: Verdict, *, truncate: bool = False) -> None:
        if truncate and len(command) > AUDIT_COMMAND_LIMIT:
            command = f"{command[:AUDIT_COMMAND_LIMIT]}... ({len(command)} chars)"
        record: dict[str, Any] = {
            "timestamp": ctx.now().isoformat(),
            "thread_id": ctx.thread_id or "unknown",
            "command": command,
            "verdict": verdict,
        }
        logger.info("[SandboxAudit] %s", json.dumps(record, ensure_ascii=False))
        ctx.emit("sandbox_audit", **record)


def blocked_message(request: ToolCallRequest, reason: str) -> ToolMessage:
    return ToolMessage(
        f"Command blocked: {reason}. Please use a safer alternative approach.",
        tool_call_id=request.call_id or "missing_id",
        name=TOOL_NAME,
        status="error",
    )


def with_warning(result: ToolResult, command: str) -> ToolResult:
    """The tool's ToolMessage with the medium-risk warning appended (a Command passes through).

    As in DeerFlow the message is rebuilt from its ids, name, status and content only.
    """
    if not isinstance(result, ToolMessage):
        return result
    warning = f"\n\n⚠️ Warning: `{command}` is a medium-risk command that may modify the runtime environment."
    content: Any = (
        [*result.content, {"type": "text", "text": warning}]
        if isinstance(result.content, list)
        else f"{result.content}{warning}"
    )
    return ToolMessage(content, id=result.id, tool_call_id=result.tool_call_id, name=result.name, status=result.status)
