"""The workflows: the run engine (``workflows/run/``: the run workflow, its subagents, the hook dispatcher), and
beside it the memory and memory-update workflows, the circuit-breaker workflow and the sandbox sweeper.

Everything in this package runs as Temporal workflow code and is replayed. It never touches the
wall clock, random numbers, files or the network: time, ids and randomness come from the run context.
"""
