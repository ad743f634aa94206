"""The run engine: the run workflow, the hook dispatcher, subagent delegation and the other workflows (memory,
circuit breaker, sandbox sweeper).

Everything in this package runs as Temporal workflow code and is replayed. It never touches the
wall clock, random numbers, files or the network: time, ids and randomness come from the run context.
"""
