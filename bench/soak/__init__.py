"""An hour of chaos, nothing lost: a deployment of real processes on this machine (3 ``hartflow worker``, 2
``hartflow serve``, the Temporal dev server on a SQLite file, SeaweedFS as S3), a driver that keeps scripted runs
going through every client (the CLI, ``langgraph-sdk`` through either API server, the ``clarification_reply``
signal), a chaos driver that kills and pauses those processes on a seeded schedule, and the checks that every
run ended exactly as its script says.

Modules: :mod:`deployment` (the processes), :mod:`scenarios` (the scripted runs and what each must leave),
:mod:`clients` (the CLI and SSE consumers, each riding out faults), :mod:`driver` (the mix of runs),
:mod:`chaos` (the faults), :mod:`checks` (the verdicts), :mod:`report` (the table); ``python -m bench.soak``.
"""
