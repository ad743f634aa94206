"""Every side effect of a run: model calls, tools, sandboxes, storage, memory. Each is a Temporal activity."""
