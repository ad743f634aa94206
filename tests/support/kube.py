"""A Kubernetes cluster for tests: kmock's API emulator over real HTTP, and a kubelet that runs sandbox pods.

No kube-apiserver can be installed here, so :class:`Cluster` serves kmock's ``KubernetesEmulator`` on a real
127.0.0.1 port, on its own thread, for the official ``kubernetes`` client. The emulator is no full apiserver:
objects keep their namespace in the body, selectors are ignored, and nothing ever sets a status.

:class:`Kubelet` plays the node. It watches the sandbox namespace, and for every new pod runs what the
container would run — ``python -S -m workers.sandbox_server`` with only the repository on ``PYTHONPATH`` (the
image carries no third-party packages) and the container's env, ``secretKeyRef`` resolved from the Secret —
on the pod's own IP (a fresh 127.0.0.x per pod) and the container port, with a fresh directory standing in for
the ``/mnt/user-data`` emptyDir. Once the readiness probe's path answers, it patches the pod's status to
Running/Ready with that IP. Deleting the pod kills its processes. Pods named in :attr:`Kubelet.hold` stay
Pending in ``ImagePullBackOff``, the way a bad image looks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kmock
from kubernetes import client as k8s
from kubernetes import watch

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "hartflow-sandboxes"


def free_port() -> int:
    """A port free on every address, so each pod IP can bind it."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def eventually(predicate: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    """Wait until ``predicate()`` is truthy and return it (a wait on a condition, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)
    return result


async def eventually_async(predicate: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    """:func:`eventually` for the event loop; ``predicate`` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.02)


class Cluster:
    """kmock's emulator on a thread of its own, a client for it, and a :class:`Kubelet`."""

    def __init__(self, workdir: Path) -> None:
        self.namespace = NAMESPACE
        self.container_port = free_port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("kmock did not start")
        configuration = k8s.Configuration()
        configuration.host = self.url
        self.core = k8s.CoreV1Api(k8s.ApiClient(configuration))
        self.kubelet = Kubelet(self, workdir)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            emulator.resources.load_bundled()
            self.emulator, self.url = emulator, str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def sandbox_settings(self, **overrides: Any) -> dict[str, Any]:
        """``sandbox:`` config for a worker using this cluster (pass to ``make_config(sandbox=...)``)."""
        kubernetes = {
            "api_server": self.url,
            "namespace": self.namespace,
            "endpoint": "pod_ip",
            "container_port": self.container_port,
            "ready_timeout_seconds": 30,
            **overrides,
        }
        return {"provider": "kubernetes", "kubernetes": kubernetes}

    def _on_loop(self, work: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return work()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def creations(self, plural: str, name: str) -> int:
        """How many times ``name`` was created (kmock's object history: ``None`` marks a deletion)."""

        def count() -> int:
            key = (kmock.resource(f"v1/{plural}"), self.namespace, name)
            if key not in self.emulator.objects:
                return 0
            history = list(self.emulator.objects[key].history)
            return sum(1 for i, v in enumerate(history) if v is not None and (i == 0 or history[i - 1] is None))

        return int(self._on_loop(count))

    def exists(self, plural: str, name: str) -> bool:
        def check() -> bool:
            key = (kmock.resource(f"v1/{plural}"), self.namespace, name)
            return key in self.emulator.objects and not self.emulator.objects[key].deleted

        return bool(self._on_loop(check))

    def names(self, plural: str) -> list[str]:
        def listing() -> list[str]:
            return sorted(
                name
                for (resource, namespace, name), obj in self.emulator.objects.items()
                if resource == kmock.resource(f"v1/{plural}") and namespace == self.namespace and not obj.deleted
            )

        return list(self._on_loop(listing))

    def close(self) -> None:
        self.kubelet.stop()
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @classmethod
    @contextlib.contextmanager
    def running(cls, workdir: Path) -> Iterator[Cluster]:
        cluster = cls(workdir)
        try:
            yield cluster
        finally:
            cluster.close()


class _Container:
    def __init__(self, process: subprocess.Popen[bytes], root: Path, address: str) -> None:
        self.process = process
        self.root = root
        self.address = address


class Kubelet:
    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self._cluster = cluster
        self._workdir = workdir
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.hold: set[str] = set()
        """Pod names to leave Pending (image pull back-off)."""
        self.containers: dict[str, _Container] = {}
        self._incarnations: dict[str, int] = {}
        self._addresses = 0
        self._lock = threading.Lock()
        self._stopping = False
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def root_of(self, pod: str) -> Path:
        """The directory serving as ``pod``'s ``/mnt/user-data``."""
        return self.containers[pod].root

    def _run(self) -> None:
        core, namespace = self._cluster.core, self._cluster.namespace
        try:
            for event in self._watch.stream(core.list_namespaced_pod, namespace):
                pod = event["object"]
                name = pod.metadata.name
                if event["type"] == "ADDED" and name not in self.containers:
                    with self._lock:
                        incarnation = self._incarnations[name] = self._incarnations.get(name, 0) + 1
                    threading.Thread(target=self._start, args=(pod, incarnation), daemon=True).start()
                elif event["type"] == "DELETED":
                    with self._lock:
                        self._incarnations[name] = self._incarnations.get(name, 0) + 1
                        container = self.containers.get(name)
                    if container is not None:
                        _kill_tree(container.process)
                        # Only now: a pod missing from ``containers`` has no process left.
                        with self._lock:
                            self.containers.pop(name, None)
        except Exception:
            if not self._stopping:
                raise

    def _start(self, pod: Any, incarnation: int) -> None:
        core, namespace, name = self._cluster.core, self._cluster.namespace, pod.metadata.name
        spec = pod.spec.containers[0]
        if name in self.hold:
            core.patch_namespaced_pod_status(name, namespace, {"status": _back_off_status(spec.image)})
            return
        with self._lock:
            self._addresses += 1
            address = str(ipaddress.IPv4Address("127.0.1.0") + self._addresses)
        root = self._workdir / f"{name}-{incarnation}"
        root.mkdir(parents=True)
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}
        for variable in spec.env or []:
            if variable.value is not None:
                env[variable.name] = variable.value
            elif variable.value_from is not None and variable.value_from.secret_key_ref is not None:
                ref = variable.value_from.secret_key_ref
                secret = core.read_namespaced_secret(ref.name, namespace)
                env[variable.name] = base64.b64decode(secret.data[ref.key]).decode()
        port = spec.ports[0].container_port
        with (self._workdir / f"{name}-{incarnation}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-S", "-m", "workers.sandbox_server", "--host", address, "--root", str(root)],
                env=env,
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        assert process.stdout is not None
        process.stdout.readline()  # "sandbox server listening on ..."
        with urllib.request.urlopen(f"http://{address}:{port}{spec.readiness_probe.http_get.path}", timeout=5) as r:
            assert r.status == 200
        with self._lock:
            current = self._incarnations.get(name) == incarnation and not self._stopping
            if current:
                self.containers[name] = _Container(process, root, address)
        if not current:  # deleted while starting
            _kill_tree(process)
            return
        core.patch_namespaced_pod_status(name, namespace, {"status": _running_status(spec.image, address)})

    def stop(self) -> None:
        self._stopping = True
        self._watch.stop()
        with self._lock:
            containers, self.containers = list(self.containers.values()), {}
        for container in containers:
            _kill_tree(container.process)


def _running_status(image: str, address: str) -> dict[str, Any]:
    conditions = [{"type": kind, "status": "True"} for kind in ("PodScheduled", "Initialized", "ContainersReady")]
    return {
        "phase": "Running",
        "podIP": address,
        "conditions": [*conditions, {"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {
                "name": "sandbox",
                "image": image,
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {}},
            }
        ],
    }


def _back_off_status(image: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {
                "type": "Ready",
                "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [sandbox]",
            },
        ],
        "containerStatuses": [
            {
                "name": "sandbox",
                "image": image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}},
            }
        ],
    }


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """Kill the server and every command it started (each in a session of its own), as a pod's end would."""
    victims = [*_descendants(process.pid), process.pid]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(10)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, []):
            found.append(child)
            frontier.append(child)
    return found
