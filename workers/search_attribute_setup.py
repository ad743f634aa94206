"""hartflow's search attributes (``workflows/search_attributes.py``) on a Temporal server.

A dev server hartflow starts gets them on its command line (``workers/devserver_options.py``, in the CLI's
spelling below); its readiness probe (``workers/devserver_readiness.py``) waits until they are registered. A
server hartflow did not start gets them from ``ensure_search_attributes``. Either way, an attribute that exists
with another type is an error: upserting it would fail every workflow task.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey

from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

_LIST_RPC_TIMEOUT = timedelta(seconds=1)


class SearchAttributeTypeMismatch(RuntimeError):
    """A hartflow search attribute exists on the server with another type; upserting it would fail."""


def cli_type_name(key: SearchAttributeKey[Any]) -> str:
    """The CLI's spelling of a search attribute type: KEYWORD_LIST -> KeywordList, INT -> Int."""
    return "".join(part.capitalize() for part in key.indexed_value_type.name.split("_"))


async def missing_search_attributes(client: Client, namespace: str) -> list[SearchAttributeKey[Any]]:
    """hartflow's attributes absent on the server; raises if one exists with another type."""
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace), timeout=_LIST_RPC_TIMEOUT
    )
    existing = dict(resp.custom_attributes)
    missing: list[SearchAttributeKey[Any]] = []
    for key in SEARCH_ATTRIBUTES:
        if key.name not in existing:
            missing.append(key)
        elif existing[key.name] != key.indexed_value_type.value:
            raise SearchAttributeTypeMismatch(
                f"search attribute {key.name} exists in namespace {namespace!r} as "
                f"{IndexedValueType.Name(existing[key.name])}, hartflow needs {cli_type_name(key)}"
            )
    return missing


async def ensure_search_attributes(client: Client, namespace: str = "default") -> list[str]:
    """Register whichever of hartflow's search attributes the server lacks; returns the names added.

    For servers hartflow did not start (a shared dev server, a self-hosted cluster): without the attributes
    every workflow task that upserts them fails. Idempotent, so it can run on every worker start.
    """
    missing = await missing_search_attributes(client, namespace)
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={
                    key.name: IndexedValueType.ValueType(key.indexed_value_type.value) for key in missing
                },
            )
        )
    return [key.name for key in missing]
