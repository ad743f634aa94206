"""Shell splitting for SandboxAudit (middlewares/_shell_split.py): DeerFlow's cuts, quote- and heredoc-aware."""

from __future__ import annotations

import pytest

from middlewares._shell_split import split_compound_command


@pytest.mark.parametrize(
    ("command", "parts"),
    [
        ("cmd1 && cmd2", ["cmd1", "cmd2"]),
        ("cmd1&&cmd2", ["cmd1", "cmd2"]),
        ("cmd1 || cmd2", ["cmd1", "cmd2"]),
        ("cmd1||cmd2", ["cmd1", "cmd2"]),
        ("cmd1 ; cmd2", ["cmd1", "cmd2"]),
        ("cmd1;cmd2", ["cmd1", "cmd2"]),
        ("a && b || c ; d", ["a", "b", "c", "d"]),
        ("a&&b||c;d", ["a", "b", "c", "d"]),
        ("ls -la", ["ls -la"]),
        ("echo 'a && b' && rm -rf /", ["echo 'a && b'", "rm -rf /"]),
        ('echo "a; b" ; c', ['echo "a; b"', "c"]),
        ("echo a\\;b", ["echo a\\;b"]),
        ("a\nb", ["a", "b"]),
        ("a | b", ["a | b"]),
        ("cat <<EOF\nx; y\nEOF\nz", ["cat <<EOF\nx; y\nEOF", "z"]),
        # Unclosed quotes and dangling escapes return the whole command (fail closed).
        ("echo 'hello", ["echo 'hello"]),
        ('echo "a && b', ['echo "a && b']),
        ("echo a\\", ["echo a\\"]),
        ("   ", ["   "]),
    ],
)
def test_split_compound_command(command: str, parts: list[str]) -> None:
    assert split_compound_command(command) == parts


def test_pipes_split_only_on_request() -> None:
    assert split_compound_command("a | b || c", split_pipes=True) == ["a", "b", "c"]
    assert split_compound_command("a | b || c") == ["a | b", "c"]
