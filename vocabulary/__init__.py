"""The shared vocabulary: what every layer of hartflow speaks.

Thread state and its reducers, messages, the activity contract (names and one dataclass in and out per
activity), the tool catalog, virtual paths, transcripts, the clarification payload, the circuit breaker's
report types and the delegation contract. Pure data and functions: no Temporal workflow calls, no I/O, so the
engine, the middlewares, the activities and the processes can all import it (and it imports none of them).
"""
