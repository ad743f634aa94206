"""Every activity reference (``vocabulary/contracts/``) against the worker's activities (``workers/worker.py``).

Workflow code calls activities by reference, so nothing at run time ties a reference's types to the function
the worker serves under its name: a wrong input type would fail every call on a live worker, a wrong output type
would hand the workflow something else than it was typed to get. This test ties them: each reference has exactly
one registered implementation, whose parameter and return annotations are the reference's types, and nothing is
registered without a reference.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity

import vocabulary.contracts
from vocabulary.activity_ref import ActivityRef
from workers.config import HartflowConfig, open_object_store
from workers.worker import activities

NO_INPUT: type = type(None)


def _refs() -> list[ActivityRef[Any, Any]]:
    """Every reference defined in the contract modules (not only the re-exported ones)."""
    found: list[ActivityRef[Any, Any]] = []
    for module in pkgutil.iter_modules(vocabulary.contracts.__path__):
        namespace = vars(importlib.import_module(f"vocabulary.contracts.{module.name}"))
        found += [value for value in namespace.values() if isinstance(value, ActivityRef)]
    return found


def _registered(home: Path) -> list[Callable[..., Any]]:
    """What the worker registers; a Kubernetes config, so the sandbox sweeper's activities are among them (its
    client is built against an address nothing listens on, and never called)."""
    config = HartflowConfig.model_validate(
        {
            "storage": {"home": str(home)},
            "sandbox": {"provider": "kubernetes", "kubernetes": {"api_server": "http://127.0.0.1:9"}},
        }
    )
    return activities(config, open_object_store(config))


def _name(implementation: Callable[..., Any]) -> str:
    definition = activity._Definition.must_from_callable(implementation)
    assert definition.name is not None
    return definition.name


def _annotations(implementation: Callable[..., Any]) -> tuple[list[Any], Any]:
    """The parameter types (after ``self``) and the return type, as the worker's data converter reads them."""
    hints = typing.get_type_hints(implementation)
    parameters = inspect.signature(implementation).parameters
    return [hints[name] for name in parameters], hints["return"]


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Callable[..., Any]]]:
    by_name: dict[str, list[Callable[..., Any]]] = {}
    for implementation in _registered(tmp_path_factory.mktemp("home")):
        by_name.setdefault(_name(implementation), []).append(implementation)
    return by_name


def test_the_contract_package_re_exports_every_reference() -> None:
    exported = set(vocabulary.contracts.__all__)
    assert {name for name, value in vars(vocabulary.contracts).items() if isinstance(value, ActivityRef)} <= exported
    assert set(_refs()) == {value for value in vars(vocabulary.contracts).values() if isinstance(value, ActivityRef)}


def test_reference_names_are_unique() -> None:
    names = [ref.name for ref in _refs()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("ref", _refs(), ids=str)
def test_each_reference_has_one_implementation_with_its_types(
    ref: ActivityRef[Any, Any], registered: dict[str, list[Callable[..., Any]]]
) -> None:
    implementations = registered.get(ref.name, [])
    assert len(implementations) == 1, f"{ref.name}: {len(implementations)} registered implementations"
    [implementation] = implementations
    parameters, returns = _annotations(implementation)
    assert parameters == ([] if ref.input is NO_INPUT else [ref.input])
    assert returns is ref.output


def test_every_registered_activity_has_a_reference(registered: dict[str, list[Callable[..., Any]]]) -> None:
    assert set(registered) == {ref.name for ref in _refs()}
