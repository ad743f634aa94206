import pytest
from activities.storage import ObjectExistsError, StorageConfigError
from activities.storage.filesystem import FilesystemObjectStore
from activities.storage.s3 import S3ObjectStore, S3Settings
from workers.config import load_config, open_object_store

@pytest.mark.parametrize("backend", ["filesystem", "s3"])
def test_roundtrip(backend, tmp_path, s3_storage):
    cfg = load_config(overrides={"storage": {"home": str(tmp_path), **(s3_storage if backend == "s3" else {})}}, environ={})
    store = open_object_store(cfg)
    store.check()
    store.put("a/b/c.json", b"1")
    assert store.get("a/b/c.json") == b"1"
    with pytest.raises(ObjectExistsError):
        store.put("a/b/c.json", b"2", if_absent=True)
    store.put("a/b/d.json", b"22", if_absent=True)
    assert [i.key for i in store.list("a/b/")] == ["a/b/c.json", "a/b/d.json"]
    assert store.head("a/b/d.json").size == 2
    assert store.delete_prefix("a/") == 2
    assert store.get("a/b/c.json") is None
    assert list(store.list("a/")) == []

def test_bad_bucket(s3_server):
    from tests.support.s3server import s3_storage_settings
    s = s3_storage_settings(s3_server, "nope-missing")
    with pytest.raises(StorageConfigError, match="storage.s3.bucket"):
        S3ObjectStore(S3Settings(**s["s3"])).check()
    s["s3"]["secret_access_key"] = "wrong"
    with pytest.raises(StorageConfigError, match="secret_access_key"):
        S3ObjectStore(S3Settings(**s["s3"])).check()
    s["s3"]["endpoint_url"] = "http://127.0.0.1:1"
    with pytest.raises(StorageConfigError, match="endpoint_url"):
        S3ObjectStore(S3Settings(**s["s3"])).check()
