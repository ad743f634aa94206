"""Temporal external storage (the claim check) on hartflow's object store: no large payload travels inline.

Every payload the SDK converts (workflow and activity inputs and results, signals, updates, queries,
continue-as-new input) that is at least ``storage.payload_threshold_bytes`` is written to the object store and
replaced in history by a small reference. The stored object is the serialised ``Payload``, keyed by its sha256
under ``payloads/`` in the SDK S3 driver's layout:

    payloads/v0/ns/{namespace}/wt/{workflow type}/wi/{workflow id}/ri/{run id}/d/sha256/{hex}

so every key of a run names its workflow id (``hartflow-{thread}``) and identical payloads of a run are stored
once. Two drivers write that layout:

* ``s3``: the SDK's own ``S3StorageDriver`` with an :class:`ObjectStoreS3Client` over our boto3
  :class:`~activities.storage.s3.S3ObjectStore` (the SDK ships only an aioboto3 client, which is not a
  dependency; the boto3 calls run in a thread);
* ``filesystem``: :class:`FilesystemPayloadDriver`, ours, under ``{home}/payloads/`` — the SDK has no
  filesystem driver.

Reading a reference needs the same driver: every client and worker gets its converter from
``workers.payloads.data_converter_for(config)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from activities.storage import ObjectExistsError, ObjectStore, StorageError, wait_out_outage
from activities.storage.filesystem import FilesystemObjectStore
from activities.storage.s3 import S3ObjectStore

PAYLOAD_PREFIX = "payloads/"
DEFAULT_PAYLOAD_THRESHOLD = 256 * 1024
"""The SDK's default. Temporal warns at 512 KiB per payload, rejects 2 MiB payloads and 4 MiB gRPC messages; at
256 KiB a workflow task that completes several commands at once (parallel tool calls) stays far below 4 MiB,
while the values a turn normally carries (a tool call, a short answer, a transcript reference) stay inline
and readable in the Web UI."""
FILESYSTEM_DRIVER = "hartflow.filesystem"
S3_DRIVER = "aws.s3driver"

T = TypeVar("T")
_PAYLOAD_RETRY_DELAY = 1.0

_SAFE = frozenset(string.ascii_letters + string.digits + "!-_.*'()")


def encode_segment(value: str | None) -> str:
    """One key segment, percent-encoded exactly as the SDK's S3 driver does (``null`` when empty)."""
    if not value:
        return "null"
    return "".join(chr(byte) if chr(byte) in _SAFE else f"%{byte:02X}" for byte in value.encode("utf-8"))


def payload_key(context: StorageDriverStoreContext, digest: str) -> str:
    """The S3 driver's key for a payload with sha256 ``digest`` stored for ``context``'s target."""
    target = context.target
    scope = ""
    if target is not None:
        scope = f"/ns/{encode_segment(target.namespace)}"
        kind = {StorageDriverWorkflowInfo: ("wt", "wi"), StorageDriverActivityInfo: ("at", "ai")}.get(type(target))
        if kind is not None:
            type_key, id_key = kind
            scope += (
                f"/{type_key}/{encode_segment(target.type)}/{id_key}/{encode_segment(target.id)}"
                f"/ri/{encode_segment(target.run_id)}"
            )
    return f"v0{scope}/d/sha256/{digest}"


class FilesystemPayloadDriver(StorageDriver):
    """Payloads as files under ``{home}/payloads/``, written create-only (content-addressed, so a second write
    of the same key is the same bytes) and checked against their digest when read back."""

    def __init__(self, store: FilesystemObjectStore) -> None:
        self._store = store

    def name(self) -> str:
        return FILESYSTEM_DRIVER

    def type(self) -> str:
        return FILESYSTEM_DRIVER

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(lambda: [self._store_one(context, payload) for payload in payloads])

    def _store_one(self, context: StorageDriverStoreContext, payload: Payload) -> StorageDriverClaim:
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        key = payload_key(context, digest)
        with contextlib.suppress(ObjectExistsError):
            self._store.put(PAYLOAD_PREFIX + key, data, if_absent=True)
        return StorageDriverClaim({"key": key, "hash_algorithm": "sha256", "hash_value": digest})

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(lambda: [self._retrieve_one(claim) for claim in claims])

    def _retrieve_one(self, claim: StorageDriverClaim) -> Payload:
        key = claim.claim_data["key"]
        data = self._store.get(PAYLOAD_PREFIX + key)
        if data is None:
            raise StorageError(f"external payload {PAYLOAD_PREFIX}{key} is missing from {self._store.describe()}")
        if hashlib.sha256(data).hexdigest() != claim.claim_data.get("hash_value"):
            raise StorageError(f"external payload {PAYLOAD_PREFIX}{key} does not match its sha256")
        payload = Payload()
        payload.ParseFromString(data)
        return payload


class ObjectStoreS3Client(S3StorageDriverClient):
    """The SDK S3 driver's client, over our boto3 store: keys land under ``{storage.s3.prefix}payloads/``.

    Every call waits out a storage outage (``wait_out_outage``) instead of failing at once. The driver runs while
    the SDK decodes a workflow activation or encodes its completion, and a failure there fails the workflow task
    with a traceback ("Failed handling activation") and is retried by the server anyway: the run cannot go on
    without the payload, so waiting for S3 is the same progress without the failure. Past the wait the error
    goes through as before."""

    def __init__(self, store: S3ObjectStore) -> None:
        self._store = store

    def _check_bucket(self, bucket: str) -> None:
        if bucket != self._store.bucket:
            raise StorageError(f"payload claim names bucket {bucket!r}; storage.s3.bucket is {self._store.bucket!r}")

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        self._check_bucket(bucket)
        await self._waiting(lambda: self._store.put(PAYLOAD_PREFIX + key, data), f"storing payload {key}")

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        self._check_bucket(bucket)
        return await self._waiting(lambda: self._store.exists(PAYLOAD_PREFIX + key), f"looking up payload {key}")

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        self._check_bucket(bucket)
        data = await self._waiting(lambda: self._store.get(PAYLOAD_PREFIX + key), f"reading payload {key}")
        if data is None:
            raise StorageError(f"external payload {PAYLOAD_PREFIX}{key} is missing from {self._store.describe()}")
        return data

    @staticmethod
    async def _waiting(operation: Callable[[], T], what: str) -> T:
        # Short pauses: a workflow task waits on this, and should go on as soon as S3 is back.
        return await asyncio.to_thread(wait_out_outage, operation, what=what, max_delay=_PAYLOAD_RETRY_DELAY)

    def describe(self) -> Mapping[str, str]:
        return {"store": self._store.describe()}


def payload_driver(store: ObjectStore) -> StorageDriver:
    if isinstance(store, S3ObjectStore):
        return S3StorageDriver(client=ObjectStoreS3Client(store), bucket=store.bucket, driver_name=S3_DRIVER)
    if isinstance(store, FilesystemObjectStore):
        return FilesystemPayloadDriver(store)
    raise TypeError(f"no external payload driver for {type(store).__name__}")


def external_storage(store: ObjectStore, threshold: int = DEFAULT_PAYLOAD_THRESHOLD) -> ExternalStorage:
    return ExternalStorage(drivers=[payload_driver(store)], payload_size_threshold=threshold)


def thread_payload_keys(store: ObjectStore, workflow_id: str, namespace: str = "default") -> Iterator[str]:
    """Every external payload key (``payloads/…``) stored for the runs of workflow ``workflow_id`` (a thread's
    runs are ``hartflow:{user}:{thread}``) and of its subagents (child workflows ``{parent}-task-{call}``, see
    ``workflows/delegation.child_workflow_id``). It lists the namespace's payloads: keys
    name the workflow type before the workflow id, so no narrower prefix covers every run of a thread."""
    run = f"/wi/{encode_segment(workflow_id)}/"
    child = f"/wi/{encode_segment(workflow_id + '-task-')}"
    for info in store.list(f"{PAYLOAD_PREFIX}v0/ns/{encode_segment(namespace)}/"):
        if run in info.key or child in info.key:
            yield info.key
