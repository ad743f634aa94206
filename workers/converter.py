"""The pydantic payload converter, with type adapters cached for the life of the process.

The SDK's pydantic converter caches its ``TypeAdapter`` per converter instance, but with external storage the
SDK builds a fresh converter for every activity task and child workflow (``DataConverter._with_store_context``
replaces the dataclass, which constructs a new payload converter). Without a shared cache each activity input
rebuilt its pydantic schema: about a third of a scripted turn's CPU time. Building a schema is pure, so the
cache is shared by all instances (``lru_cache`` is thread-safe: workflow activations and activities run in
different threads).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import CompositePayloadConverter, DefaultPayloadConverter, JSONPlainPayloadConverter

_MAX_CACHED_TYPE_ADAPTERS = 1024


@functools.lru_cache(maxsize=_MAX_CACHED_TYPE_ADAPTERS)
def _type_adapter(type_hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(type_hint)


class _SharedCachePydanticJSONConverter(PydanticJSONPlainPayloadConverter):
    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        hint: Any = type_hint if type_hint is not None else Any
        try:
            hash(hint)
        except TypeError:
            return TypeAdapter(hint).validate_json(payload.data)
        return _type_adapter(hint).validate_json(payload.data)


_CONVERTERS = tuple(
    _SharedCachePydanticJSONConverter() if isinstance(c, JSONPlainPayloadConverter) else c
    for c in DefaultPayloadConverter.default_encoding_payload_converters
)
"""Built once: the SDK constructs a payload converter per workflow activation and per activity task, and the
pydantic one builds a schema serializer and a cache wrapper each time (~1 ms of a scripted turn's CPU,
``python -m bench.cpu_profile``). None of them keeps per-call state, so every instance shares them."""


class HartflowPayloadConverter(CompositePayloadConverter):
    """The SDK's ``PydanticPayloadConverter`` encodings, with :func:`_type_adapter`'s process-wide cache."""

    def __init__(self) -> None:
        super().__init__(*_CONVERTERS)
