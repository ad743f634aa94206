"""``"package.module:Name"`` strings, DeerFlow's ``use:`` convention, checked and loaded in one place.

Config sections that name code to run (``models[].use``, ``extensions``, guardrail providers, safety
detectors) all spell it this way. :func:`check_class_path` is the shape check a config validator runs;
:func:`load_class_path` imports the module and returns the attribute, telling a missing package apart from a
module without that name, so the message says what to fix (install something, or correct a typo).
"""

from __future__ import annotations

import importlib
from typing import Literal

__all__ = ["ClassPathError", "check_class_path", "load_class_path"]

Problem = Literal["shape", "package", "module", "attribute", "kind"]


class ClassPathError(ValueError):
    """A class path that does not name what it should; the message is one line, without the caller's prefix."""

    def __init__(self, message: str, problem: Problem) -> None:
        super().__init__(message)
        self.problem = problem


def check_class_path(value: str) -> tuple[str, str]:
    """``(module, name)`` of ``value``, or :class:`ClassPathError` when it is not ``module:Name``."""
    module, sep, name = value.partition(":")
    if not (sep and module.strip() and name.strip()) or ":" in name:
        raise ClassPathError(f"{value!r} must look like 'package.module:ClassName'", "shape")
    return module, name


def load_class_path(value: str, base: type | None = None) -> type:
    """The class ``value`` names, a subclass of ``base`` when given."""
    module_name, name = check_class_path(value)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            top = missing.split(".")[0]
            hint = f"no module named {missing!r} (is the package that provides {top!r} installed?)"
            raise ClassPathError(f"cannot import {module_name}: {hint}", "package") from None
        raise ClassPathError(f"cannot import {module_name}: {exc}", "module") from None
    except ImportError as exc:
        raise ClassPathError(f"cannot import {module_name}: {exc}", "module") from None
    except Exception as exc:
        # Importing runs the module's code: whatever it raises is this entry's problem, not the caller's crash.
        raise ClassPathError(f"cannot import {module_name}: {type(exc).__name__}: {exc}", "module") from None
    found = getattr(module, name, None)
    if found is None:
        raise ClassPathError(f"module {module_name} has no {name!r}", "attribute")
    if not isinstance(found, type) or (base is not None and not issubclass(found, base)):
        wanted = f"a {base.__name__} subclass" if base is not None else "a class"
        raise ClassPathError(f"{value} is not {wanted}", "kind")
    return found
