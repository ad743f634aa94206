"""``package.module:ClassName`` references: how a config names a class it wants built (extension middlewares,
guardrail providers, safety detectors).

Checked when the config loads (:func:`check_class_ref`, a pydantic validator's body), resolved where the class is
used (:func:`load_class_ref`): inside the workflow for middlewares and detectors, in an activity for providers.
"""

from __future__ import annotations

import importlib
from typing import Any

CLASS_REF_SHAPE = "'package.module:ClassName'"


def check_class_ref(ref: str) -> str:
    """``ref`` itself when it has a module and a class name, else ValueError naming the expected shape."""
    module_name, sep, class_name = ref.partition(":")
    if not (sep and module_name and class_name):
        raise ValueError(f"{ref!r} must look like {CLASS_REF_SHAPE}")
    return ref


def load_class_ref(ref: str) -> Any:
    """What ``ref`` names. ValueError for a malformed ``ref``, ImportError for its module, AttributeError when the
    module has no such name; the callers turn these into their own messages."""
    module_name, _, class_name = check_class_ref(ref).partition(":")
    return getattr(importlib.import_module(module_name), class_name)
