"""Every change to the run workflow's command sequence, by its ``workflow.patched`` id, and the baseline patch that
stands for all of them in runs started since it.

A change to the commands a run issues goes behind ``workflow.patched(ID)``, so that histories recorded before it
replay the old path (``tests/test_replay.py`` replays the committed ones). For every patch a new run takes, the SDK's
core records a marker and upserts the ``TemporalChangeVersion`` search attribute (sdk-core's patch state machine,
temporalio/sdk-core#495): two history events and a visibility write, in every run, for every patch ever made. With
fourteen of them, a five-turn run spent more events on patch bookkeeping than on its tool calls.

So a run asks the baselines, newest first, once (:data:`BASELINES`, ``TemporalRunContext.take_patch_baseline``). A
run that recorded :data:`BASELINE` takes every patch in :data:`IN_BASELINE` without asking: one marker and one
upsert in all. A run whose history lacks it takes the set of the newest baseline it did record, and a run recorded
before any baseline asks each patch as it always did. A change made after the latest baseline gets a patch of its
own, asked as usual, until a new baseline takes it in; ids are never reused, and a baseline's set never changes
(``tests/test_patches.py``).
"""

from __future__ import annotations

from typing import Final

BASELINE: Final = "hartflow-baseline-4"
"""Runs started since this marker take every patch of :data:`IN_BASELINE`."""
BASELINE_3: Final = "hartflow-baseline-3"
BASELINE_2: Final = "hartflow-baseline-2"
BASELINE_1: Final = "hartflow-baseline-1"
"""The first baseline: runs that recorded it take every patch of :data:`IN_BASELINE_1`."""

# The patches, in the order they were made. What each one changed is written where it is asked.
RUN_ARCHIVE: Final = "hartflow-run-archive"
RUN_ARCHIVE_PARTS: Final = "hartflow-run-archive-parts"
VISIBILITY_SYNC: Final = "hartflow-visibility-sync"
SUBAGENT_STEPS: Final = "hartflow-subagent-steps"
INPUT_CHECK: Final = "hartflow-input-check"
ANSWER_INVALID_TOOL_CALLS: Final = "hartflow-answer-invalid-tool-calls"
PREAMBLE_BY_HASH: Final = "hartflow-preamble-by-hash"
TERMINAL_RESPONSE: Final = "hartflow-terminal-response"
SANDBOX_RELEASE_BY_THREAD: Final = "hartflow-sandbox-release-by-thread"
READ_BEFORE_WRITE: Final = "hartflow-read-before-write"
SKILL_TOOL_POLICY: Final = "hartflow-skill-tool-policy"
BREAKER_KNOWN_CLOSED: Final = "hartflow-breaker-known-closed"
LOAD_LOCALLY: Final = "hartflow-load-locally"
TURNS_REFRESH: Final = "hartflow-turns-refresh"
TURNS_BY_COUNT: Final = "hartflow-turns-by-count"
BREAKER_CHECKS_EVERY_CALL: Final = "hartflow-breaker-checks-every-call"
LOCAL_FAILURE_AS_ACTIVITY_ERROR: Final = "hartflow-local-failure-as-activity-error"
"""Asked where a local activity failed for good, so runs of baseline 2 without one keep their history."""
BREAKER_IN_MODEL_CALL: Final = "hartflow-breaker-in-model-call"
CLOSE_IN_ONE_ACTIVITY: Final = "hartflow-close-in-one-activity"

IN_BASELINE_1: Final = frozenset(
    {
        RUN_ARCHIVE,
        RUN_ARCHIVE_PARTS,
        VISIBILITY_SYNC,
        SUBAGENT_STEPS,
        INPUT_CHECK,
        ANSWER_INVALID_TOOL_CALLS,
        PREAMBLE_BY_HASH,
        TERMINAL_RESPONSE,
        SANDBOX_RELEASE_BY_THREAD,
        READ_BEFORE_WRITE,
        SKILL_TOOL_POLICY,
        BREAKER_KNOWN_CLOSED,
        LOAD_LOCALLY,
        TURNS_REFRESH,
    }
)
IN_BASELINE_2: Final = IN_BASELINE_1 | {TURNS_BY_COUNT, BREAKER_CHECKS_EVERY_CALL}
IN_BASELINE_3: Final = IN_BASELINE_2 | {LOCAL_FAILURE_AS_ACTIVITY_ERROR, BREAKER_IN_MODEL_CALL}
IN_BASELINE: Final = IN_BASELINE_3 | {CLOSE_IN_ONE_ACTIVITY}

BASELINES: Final = (
    (BASELINE, IN_BASELINE),
    (BASELINE_3, IN_BASELINE_3),
    (BASELINE_2, IN_BASELINE_2),
    (BASELINE_1, IN_BASELINE_1),
)
"""Every baseline and the patches it stands for, newest first: the order a run asks them in."""
