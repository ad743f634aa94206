"""Deterministic workflow code: the run workflow, the hook dispatcher, thread state and its reducers.

Everything in this package runs inside Temporal's workflow sandbox and is replayed. It never touches the
wall clock, random numbers, files or the network: time, ids and randomness come from the run context.
"""
