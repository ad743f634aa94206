"""``hartflow worker``, ``dev`` and ``serve`` freeze what they built before serving
(``workers.cli.processes.freeze_startup_heap``): a full garbage collection, which holds the GIL and can land on a
workflow thread, then walks what the process allocates while it serves, not its imports."""

from __future__ import annotations

import subprocess
import sys


def test_the_startup_heap_leaves_the_collectors_walk_and_live_objects_stay_freed_by_reference() -> None:
    code = """
import gc, weakref
import workers.worker  # the worker's imports: temporalio, langchain, pydantic, the middlewares
from workers.cli.processes import freeze_startup_heap

class Held: pass

before = len(gc.get_objects())
held = Held()
gone = weakref.ref(held)
freeze_startup_heap()
after = len(gc.get_objects())
del held  # a frozen object is still freed when its last reference goes
print(before, after, gc.get_freeze_count(), gone() is None)
"""
    # A process of its own: freezing is for the process's whole life, and this one's must stay as it is.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, frozen, freed = result.stdout.split()
    assert int(frozen) >= int(before) // 2, result.stdout
    assert int(after) < int(before) // 10, result.stdout  # what a full collection still walks
    assert freed == "True"
