"""The ``s3`` backend (boto3): keys are objects under ``s3://{bucket}/{prefix}``.

Works with AWS S3 and S3-compatible servers (SeaweedFS, MinIO): set ``endpoint_url`` and, for most
self-hosted servers, ``addressing_style: path``. Credentials come from the settings when given, otherwise from
boto3's usual chain (environment, shared config, instance/pod roles).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator
from typing import Any, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from activities.storage import (
    ObjectExistsError,
    ObjectInfo,
    ObjectStore,
    StorageConfigError,
    StorageError,
    validate_key,
)

_PROBE_KEY = ".hartflow-storage-probe"
_CREDENTIAL_ERRORS = {"InvalidAccessKeyId": "access_key_id", "SignatureDoesNotMatch": "secret_access_key"}


class S3Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bucket: str = Field("", description="the bucket every worker shares (must exist)")
    prefix: str = Field("hartflow/", description="key prefix inside the bucket; ends with '/'")
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint, e.g. http://127.0.0.1:8333")
    region: str = "us-east-1"
    addressing_style: Literal["auto", "path", "virtual"] = Field(
        "auto", description="'path' for most self-hosted servers (SeaweedFS, MinIO)"
    )
    access_key_id: str | None = Field(None, description="unset = boto3's credential chain")
    secret_access_key: SecretStr | None = None
    connect_timeout_seconds: float = Field(5, gt=0)
    read_timeout_seconds: float = Field(60, gt=0)


class S3ObjectStore(ObjectStore):
    backend = "s3"

    def __init__(self, settings: S3Settings):
        if not settings.bucket:
            raise StorageConfigError("storage.s3.bucket is not set (storage.backend is s3)")
        self.settings = settings
        self.bucket = settings.bucket
        self.prefix = settings.prefix if not settings.prefix or settings.prefix.endswith("/") else settings.prefix + "/"
        self._local = threading.local()

    @property
    def client(self) -> Any:
        # boto3 clients are thread-safe, but creating one is not; one per thread keeps creation safe and cheap.
        client = getattr(self._local, "client", None)
        if client is None:
            s = self.settings
            client = boto3.session.Session().client(
                "s3",
                endpoint_url=s.endpoint_url,
                region_name=s.region,
                aws_access_key_id=s.access_key_id,
                aws_secret_access_key=s.secret_access_key.get_secret_value() if s.secret_access_key else None,
                config=Config(
                    s3={"addressing_style": s.addressing_style},
                    signature_version="s3v4",
                    connect_timeout=s.connect_timeout_seconds,
                    read_timeout=s.read_timeout_seconds,
                    retries={"max_attempts": 3, "mode": "standard"},
                ),
            )
            self._local.client = client
        return client

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _key(self, key: str) -> str:
        return self.prefix + validate_key(key)

    def check(self) -> None:
        where = self.settings.endpoint_url or "the AWS default endpoint"
        try:
            # A GET (unlike HEAD) returns an error body, whose code tells a missing bucket from bad credentials.
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
            self.put(_PROBE_KEY, b"ok")
            self.get(_PROBE_KEY)
            self.delete(_PROBE_KEY)
        except StorageConfigError:
            raise
        except StorageError as exc:
            raise StorageConfigError(f"storage.s3.endpoint_url: cannot reach S3 at {where}: {exc}") from None
        except ClientError as exc:
            raise self._config_error(exc) from None
        except (BotoCoreError, ValueError) as exc:
            raise StorageConfigError(f"storage.s3.endpoint_url: cannot reach S3 at {where}: {exc}") from None

    def _config_error(self, exc: ClientError) -> StorageConfigError:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("NoSuchBucket", "404") or status == 404:
            return StorageConfigError(f"storage.s3.bucket: bucket {self.bucket!r} does not exist")
        if code in _CREDENTIAL_ERRORS:
            return StorageConfigError(f"storage.s3.{_CREDENTIAL_ERRORS[code]}: S3 rejected the credentials ({code})")
        if code in ("AccessDenied", "403") or status == 403:
            return StorageConfigError(
                f"storage.s3.access_key_id: access to bucket {self.bucket!r} denied; check the credentials"
            )
        return StorageConfigError(f"storage.s3: {code or status}: {exc}")

    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, operation)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchBucket", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise self._config_error(exc) from None
            raise
        except (EndpointConnectionError, BotoCoreError) as exc:
            # The message says it all; without botocore's and urllib3's chained tracebacks the failure stays small
            # enough for Temporal to keep as the pending activity's last failure (the server drops big ones).
            raise StorageError(f"S3 {operation} failed: {exc}") from None

    def get(self, key: str) -> bytes | None:
        try:
            response = self._call("get_object", Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise StorageError(f"S3 get {key} failed: {exc}") from exc
        body: bytes = response["Body"].read()
        return body

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            self._call("put_object", Key=self._key(key), Body=data, **extra)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if if_absent and code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise ObjectExistsError(key) from None
            raise StorageError(f"S3 put {key} failed: {exc}") from exc

    def head(self, key: str) -> ObjectInfo | None:
        try:
            response = self._call("head_object", Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise StorageError(f"S3 head {key} failed: {exc}") from exc
        return ObjectInfo(key, int(response["ContentLength"]), response["LastModified"], response["ETag"].strip('"'))

    def delete(self, key: str) -> None:
        try:
            self._call("delete_object", Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise StorageError(f"S3 delete {key} failed: {exc}") from exc

    def list_children(self, prefix: str) -> builtins.list[str]:
        names: set[str] = set()
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            try:
                page = self._call("list_objects_v2", Prefix=self.prefix + prefix, Delimiter="/", **extra)
            except ClientError as exc:
                raise StorageError(f"S3 list {prefix} failed: {exc}") from exc
            start = len(self.prefix + prefix)
            names.update(
                item["Prefix"][start:].rstrip("/")
                for item in page.get("CommonPrefixes", [])
                if self._holds_objects(item["Prefix"])
            )
            names.update(item["Key"][start:] for item in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return sorted(names)
            token = page["NextContinuationToken"]

    def _holds_objects(self, full_prefix: str) -> bool:
        """Filer-backed servers (SeaweedFS) keep the "folders" of deleted keys and list them as common prefixes,
        which AWS never does: a prefix counts only while an object is still under it."""
        try:
            page = self._call("list_objects_v2", Prefix=full_prefix, MaxKeys=1)
        except ClientError as exc:
            raise StorageError(f"S3 list {full_prefix} failed: {exc}") from exc
        return bool(page.get("Contents"))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            try:
                page = self._call("list_objects_v2", Prefix=self.prefix + prefix, **extra)
            except ClientError as exc:
                raise StorageError(f"S3 list {prefix} failed: {exc}") from exc
            for item in page.get("Contents", []):
                yield ObjectInfo(
                    item["Key"][len(self.prefix) :], int(item["Size"]), item["LastModified"], item["ETag"].strip('"')
                )
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]
