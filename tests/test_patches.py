"""The baseline patch (``middlewares/patches.py``): a new run records one patch marker for every change it takes,
and the set the baseline stands for never changes (runs that recorded it replay against it forever)."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from middlewares import patches
from tests.support import start_run
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, replay

_BASELINE_1 = {
    "hartflow-run-archive",
    "hartflow-run-archive-parts",
    "hartflow-visibility-sync",
    "hartflow-subagent-steps",
    "hartflow-input-check",
    "hartflow-answer-invalid-tool-calls",
    "hartflow-preamble-by-hash",
    "hartflow-terminal-response",
    "hartflow-sandbox-release-by-thread",
    "hartflow-read-before-write",
    "hartflow-skill-tool-policy",
    "hartflow-breaker-known-closed",
    "hartflow-load-locally",
    "hartflow-turns-refresh",
}


_BASELINE_2 = _BASELINE_1 | {"hartflow-turns-by-count", "hartflow-breaker-checks-every-call"}
_BASELINE_3 = _BASELINE_2 | {"hartflow-local-failure-as-activity-error", "hartflow-breaker-in-model-call"}
_BASELINE_4 = _BASELINE_3 | {"hartflow-close-in-one-activity"}


def test_each_baseline_stands_for_exactly_the_patches_made_before_it() -> None:
    """A patch added to a baseline after runs recorded it would turn on in their replay: a new change gets a
    patch of its own (and a later baseline a new id)."""
    assert (patches.BASELINE_1, patches.IN_BASELINE_1) == ("hartflow-baseline-1", _BASELINE_1)
    assert (patches.BASELINE_2, patches.IN_BASELINE_2) == ("hartflow-baseline-2", _BASELINE_2)
    assert (patches.BASELINE_3, patches.IN_BASELINE_3) == ("hartflow-baseline-3", _BASELINE_3)
    assert (patches.BASELINE, patches.IN_BASELINE) == ("hartflow-baseline-4", _BASELINE_4)
    assert [baseline for baseline, _ in patches.BASELINES] == [
        "hartflow-baseline-4",
        "hartflow-baseline-3",
        "hartflow-baseline-2",
        "hartflow-baseline-1",
    ], "newest first: a run asks the baseline it may have recorded before the older ones"


async def test_a_new_run_records_one_patch_marker_and_one_version_upsert(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [calls(tool_call("ls", "c1", path="/mnt/user-data/workspace")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "look", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        await replay(client, handle)
    assert view.status == "completed"
    markers = [
        e.marker_recorded_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    upserts = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "TemporalChangeVersion"
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
    taken = [json.loads(m.details["patch-data"].payloads[0].data)["id"] for m in markers]
    assert taken == ["hartflow-baseline-4"]
    assert len(upserts) == 1
