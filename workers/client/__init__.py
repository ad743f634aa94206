"""The client side of a run: how the CLI, the Agent Server, the benchmarks, the soak and the test helpers start,
answer, cancel, find and read a thread's run.

- ``runs.py``: :class:`~workers.client.runs.Runs`, the one place a run is started (its ids, policies, search
  attributes, memo, summary and details), answered and cancelled.
- ``threads.py``: which workflow holds a user's thread (per-user ids, legacy runs) and what a thread delete removes.
- ``reader.py``: reading a run from outside, live while it is open and from its archive once it closed.
- ``causes.py``: why a workflow or an update failed, from the end of its ``.cause`` chain.

Nothing here is imported by workflow code: this is ``workers/`` (import-linter's top layer).
"""
