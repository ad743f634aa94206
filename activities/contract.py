"""How an activity implements its contract: ``@implements(TOOL_EXECUTE)`` instead of ``@activity.defn(name=...)``.

The reference (``vocabulary/contracts/``) carries the activity's name and its input and output types; registering
under ``ref.name`` keeps the name the workflow calls and the name the worker serves one declaration, and
``tests/test_activity_contracts.py`` checks each implementation's annotations against the reference's types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import activity

from vocabulary.activity_ref import ActivityRef

F = TypeVar("F", bound=Callable[..., Any])


def implements(ref: ActivityRef[Any, Any]) -> Callable[[F], F]:
    """Register the decorated function or method as the activity ``ref`` names."""
    return activity.defn(name=ref.name)
