"""Where tools run: the provider interface and its backends."""

from activities.sandbox.base import GrepMatch, Sandbox, SandboxError, SandboxProvider

__all__ = ["GrepMatch", "Sandbox", "SandboxError", "SandboxProvider"]
