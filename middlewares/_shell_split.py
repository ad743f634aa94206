"""Shell splitting for SandboxAudit, pure: a compound command cut into its sub-commands, quote- and heredoc-aware.

DeerFlow's heuristic splitter (``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/sandbox_audit_middleware.py``), not a shell parser: its
cuts decide which sub-commands the audit rules see, so they are kept identical. Used by
``middlewares/sandbox_audit.py``; tested in ``tests/test_shell_split.py`` (and ``tests/test_sandbox_audit.py``).
"""

from __future__ import annotations

import re

# A heredoc header and its delimiter (``<<EOF``, ``<< EOF``, ``<<-EOF``, ``<<\EOF``, ``<<'EOF'``, ``<<"EOF"``).
# The lookahead stops ``<<<`` (a here-string, no body) at its first ``<``; the lookbehind stops its trailing
# ``<<`` one character later, where ``<<< "text"`` would read as a heredoc delimited by ``text``.
_HEREDOC_HEADER = re.compile(r"(?<!<)<<(?!<)-?[ \t]*(?:\\?([A-Za-z_][\w.-]*)|'([^'\n]*)'|\"([^\"\n]*)\")")


def _consume_heredoc_bodies(command: str, pos: int, delimiters: list[str]) -> int:
    """The index just past the bodies opened so far, consumed in header order, each up to the line whose
    stripped text is its delimiter (``strip`` covers ``<<-`` tab stripping). An unterminated body is the
    rest of the string: there is no later statement to find."""
    for delimiter in delimiters:
        while True:
            newline = command.find("\n", pos)
            if newline == -1:
                return len(command)
            line, pos = command[pos:newline], newline + 1
            if line.strip() == delimiter:
                break
    return pos


def split_compound_command(command: str, *, split_pipes: bool = False) -> list[str]:
    """Split on unquoted ``&&``, ``||``, ``;`` and newlines (and ``|`` with ``split_pipes``), quote-aware.

    Operators need no surrounding whitespace (``safe;rm -rf /``). A newline separates statements exactly like
    ``;``. A heredoc body is data: its header is recorded and the body consumed verbatim at the newline that
    starts it, so a body line ``$(curl url)`` is not promoted to command position; ``<<`` inside ``((…))`` or
    ``$((…))`` is a bit shift and opens none. An unclosed quote or a dangling escape returns the whole
    command (fail closed: classify everything rather than drop a part). Pipes split only on request:
    a pipeline is one command, but the word after ``|`` is a new command position.
    """
    parts: list[str] = []
    current: list[str] = []
    pending_heredocs: list[str] = []
    in_single = in_double = escaping = False
    arithmetic_depth = 0
    index = 0

    def close_part() -> None:
        part = "".join(current).strip()
        if part:
            parts.append(part)
        current.clear()

    while index < len(command):
        char = command[index]
        if escaping:
            current.append(char)
            escaping = False
            index += 1
            continue
        if char == "\\" and not in_single:
            current.append(char)
            escaping = True
            index += 1
            continue
        if char == "'" and not in_double:
            in_single = not in_single
        elif char == '"' and not in_single:
            in_double = not in_double
        elif not in_single and not in_double:
            if command.startswith("((", index):
                arithmetic_depth += 1
                current.append("((")
                index += 2
                continue
            if arithmetic_depth and command.startswith("))", index):
                arithmetic_depth -= 1
                current.append("))")
                index += 2
                continue
            if char == "<" and not arithmetic_depth and (heredoc := _HEREDOC_HEADER.match(command, index)):
                pending_heredocs.append(next(group for group in heredoc.groups() if group is not None))
                current.append(heredoc.group(0))
                index = heredoc.end()
                continue
            if char == "\n":
                # The body after a heredoc header belongs to the statement this newline closes.
                if pending_heredocs:
                    body_end = _consume_heredoc_bodies(command, index + 1, pending_heredocs)
                    pending_heredocs = []
                    current.append(command[index:body_end])
                    index = body_end
                else:
                    index += 1
                close_part()
                continue
            if command.startswith("&&", index) or command.startswith("||", index):
                close_part()
                index += 2
                continue
            # After "||", so a single "|" cannot steal that operator.
            if (split_pipes and char == "|") or char == ";":
                close_part()
                index += 1
                continue
        current.append(char)
        index += 1

    if in_single or in_double or escaping:
        return [command]
    close_part()
    return parts or [command]
