"""Processes: the Temporal worker, the CLI, the embedded dev stack, the sandbox server."""
