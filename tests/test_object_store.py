"""The ObjectStore contract on both backends (the filesystem home and a real S3 server, SeaweedFS), and the
storage checks that make a worker with a bad storage config fail at start, naming the setting."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.storage import (
    ObjectExistsError,
    ObjectStore,
    StorageConfigError,
    StorageError,
    activity_errors,
    validate_key,
)
from activities.storage.filesystem import FilesystemObjectStore
from activities.storage.s3 import S3ObjectStore, S3Settings
from workers.config import load_config, open_object_store
from workers.testing.s3 import S3Server, s3_storage_settings


@pytest.fixture(params=["filesystem", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    storage: dict[str, Any] = request.getfixturevalue("s3_storage") if request.param == "s3" else {}
    config = load_config(overrides={"storage": {"home": str(tmp_path), **storage}}, environ={})
    objects = open_object_store(config)
    assert objects.backend == request.param
    objects.check()
    return objects


def test_put_get_list_delete_and_the_create_only_write(store: ObjectStore) -> None:
    store.put("a/b/c.json", b"1")
    assert store.get("a/b/c.json") == b"1" and store.get("a/b/missing.json") is None
    store.put("a/b/c.json", b"11")  # a plain put replaces
    with pytest.raises(ObjectExistsError):
        store.put("a/b/c.json", b"2", if_absent=True)
    assert store.get("a/b/c.json") == b"11", "a refused create-only write changes nothing"
    store.put("a/b/d.json", b"22", if_absent=True)
    store.put("a/e.json", b"3")
    assert [i.key for i in store.list("a/b/")] == ["a/b/c.json", "a/b/d.json"]
    info = store.head("a/b/d.json")
    assert info is not None and info.size == 2 and store.exists("a/b/d.json")
    assert store.head("a/nothing") is None
    assert store.list_children("a/") == ["b", "e.json"]

    assert store.delete_prefix("a/b/") == 2
    store.delete("a/b/c.json")  # deleting a missing key is fine
    assert store.get("a/b/c.json") is None and list(store.list("a/b/")) == []
    # A prefix whose objects are gone is gone from listings too (SeaweedFS keeps the folders; they do not count).
    assert store.list_children("a/") == ["e.json"]


def test_keys_cannot_escape_the_root() -> None:
    for bad in ("", "/abs", "a/../b", "a//b", "./a", "a\\b", "a\x00"):
        with pytest.raises(ValueError, match="invalid storage key"):
            validate_key(bad)


def test_storage_errors_in_activities_retry_unless_the_config_is_wrong() -> None:
    with pytest.raises(ApplicationError) as raised, activity_errors():
        raise StorageConfigError("storage.s3.bucket: bucket 'x' does not exist")
    assert (raised.value.type, raised.value.non_retryable) == ("StorageConfigError", True)
    with pytest.raises(StorageError), activity_errors():
        raise StorageError("S3 put failed")  # left to the activity's retry policy


@pytest.mark.parametrize(
    ("broken", "setting"),
    [
        ({"bucket": "nope-missing"}, "storage.s3.bucket"),
        ({"secret_access_key": "wrong"}, "storage.s3.secret_access_key"),
        ({"access_key_id": "nobody"}, "storage.s3.access_key_id"),
        ({"endpoint_url": "http://127.0.0.1:1"}, "storage.s3.endpoint_url"),
        ({"bucket": ""}, "storage.s3.bucket"),
    ],
)
def test_a_bad_s3_config_is_named_by_its_setting(s3_server: S3Server, broken: dict[str, str], setting: str) -> None:
    settings = s3_storage_settings(s3_server, "some-bucket")["s3"]
    assert isinstance(settings, dict)
    with pytest.raises(StorageConfigError, match=f"^{re.escape(setting)}"):
        S3ObjectStore(S3Settings(**{**settings, **broken})).check()


def test_an_unwritable_home_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StorageConfigError, match=r"^storage\.home "):
        FilesystemObjectStore(tmp_path / "file" / "home").check()
