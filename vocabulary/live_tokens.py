"""Where a model call's live token batches are kept: the side channel between the model activity (which writes
them, ``activities/live_tokens.py``) and the API replicas (which read them, ``workers/api/live_tokens.py``).

Tokens do not travel through workflow history: a 2,000-token answer sent as workflow-stream signals would cost
hundreds of history events (``bench/token_transport.py`` measures both). Instead each batch is one object of the
thread's storage, under the run chain's folder::

    users/{user}/threads/{thread}/live/{chain}/{anchor}/{attempt}/{seq}.json

``chain`` is the run chain's first run id, ``anchor`` the stream offset of the ``model_call`` progress event
that announced the call (so a reader knows which call follows which durable item), ``attempt`` the activity
attempt and ``seq`` the batch's number within it. Numbers are zero-padded so listing order is reading order.
"""

from __future__ import annotations

from vocabulary.paths import thread_dir

LIVE_DIR = "live"


def chain_prefix(user_id: str, thread_id: str, chain: str) -> str:
    """The folder of one run chain's live tokens."""
    return f"{thread_dir(user_id, thread_id)}/{LIVE_DIR}/{chain}"


def call_prefix(chain: str, anchor: int) -> str:
    """The folder of one model call's batches, all attempts (``chain`` is :func:`chain_prefix`'s result)."""
    return f"{chain}/{anchor:010d}/"


def batch_key(chain: str, anchor: int, attempt: int, seq: int) -> str:
    return f"{chain}/{anchor:010d}/{attempt:04d}/{seq:08d}.json"


def batch_position(key: str) -> tuple[int, int] | None:
    """``(attempt, seq)`` of a batch key, ``None`` for any other key."""
    parts = key.rsplit("/", 2)
    if len(parts) != 3 or not parts[2].endswith(".json"):
        return None
    attempt, seq = parts[1], parts[2].removesuffix(".json")
    if not (attempt.isdigit() and seq.isdigit()):
        return None
    return int(attempt), int(seq)
