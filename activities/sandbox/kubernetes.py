"""The ``kubernetes`` provider: a thread's sandbox is a Pod running hartflow's sandbox server.

Per sandbox: Pod ``sandbox-{id}``, ClusterIP Service ``sandbox-{id}-svc`` and Secret ``sandbox-{id}-token``
(the bearer token the server demands), in one configurable namespace. The id is DeerFlow's
``sha256("{user_id}:{thread_id}")[:16]``, so every worker derives the same names and acquiring is idempotent:
a 409 on create adopts what already exists. A worker that dies mid-tool-call therefore leaves a pod the
retried activity adopts rather than duplicates.

* ``acquire`` (lazily, inside the first sandbox tool call's activity, which heartbeats meanwhile): create
  Secret, Pod and Service, then wait until the pod is Ready. On timeout the three are deleted again (as
  DeerFlow tears down a sandbox that never became ready) and the error names the pod and its last condition;
  the activity's retry policy decides what happens next.
* ``get``: this worker's cache, else the pod itself when it exists and is Ready (a restarted worker).
* ``release`` deletes Pod, Service and Secret, a 404 counting as done, so it is idempotent and retried
  through the activity retry policy. The run's ``after_agent`` calls it in the workflow's ``finally``
  path: that is the compensation, on success, failure and cancellation alike.
* ``inventory`` lists the sandbox pods for the sweeper (``workflows/sandbox_sweeper.py``) and operators.

Parts: the settings (``activities/sandbox/kubernetes_settings.py``), the objects' names and manifests
(``activities/sandbox/kubernetes_manifests.py``), the API calls (``activities/sandbox/kubernetes_api.py``).
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from activities.sandbox.base import Sandbox, SandboxError, SandboxProvider
from activities.sandbox.kubernetes_api import SandboxNamespace, readiness
from activities.sandbox.kubernetes_manifests import (
    COMMON_LABELS,
    CREATED_AT_ANNOTATION,
    SANDBOX_ID_LABEL,
    SANDBOX_ID_PATTERN,
    SANDBOX_SELECTOR,
    THREAD_ID_ANNOTATION,
    USER_ID_ANNOTATION,
    WORKFLOW_ID_ANNOTATION,
    identity_annotations,
    pod_manifest,
    pod_name,
    sandbox_id_for,
    secret_manifest,
    secret_name,
    service_manifest,
    service_name,
)
from activities.sandbox.kubernetes_settings import KubernetesSandboxSettings
from activities.sandbox.remote import RemoteSandbox
from vocabulary.contracts import SandboxRecord
from vocabulary.paths import InvalidIdError, thread_dir


class SandboxNotReadyError(RuntimeError):
    """A sandbox pod that did not become Ready in time (or is still terminating): retried by the activity."""


class KubernetesSandboxProvider(SandboxProvider):
    uses_thread_data_mounts = False

    def __init__(
        self, settings: KubernetesSandboxSettings, *, bash_timeout: float = 600, api: Any | None = None
    ) -> None:
        self.settings = settings
        self._namespace = SandboxNamespace(settings, api)
        self._bash_timeout = bash_timeout
        self._sandboxes: dict[str, RemoteSandbox] = {}
        self._lock = threading.Lock()
        # Parallel tool calls of one turn acquire the same sandbox: one creates, the others wait for it.
        self._acquiring: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)

    # -- the provider interface ----------------------------------------------------------------------------

    def acquire(self, user_id: str, thread_id: str, *, run_key: str = "") -> str:
        try:
            thread_dir(user_id, thread_id)
        except InvalidIdError as e:
            raise SandboxError(str(e)) from None
        sandbox_id = sandbox_id_for(user_id, thread_id)
        with self._lock:
            gate = self._acquiring[sandbox_id]
        with gate:
            with self._lock:
                if sandbox_id in self._sandboxes:
                    return sandbox_id
            identity = identity_annotations(user_id, thread_id, run_key, datetime.now(UTC))
            token = self._create_or_adopt_secret(sandbox_id, identity)
            self._create_or_adopt_pod(
                pod_manifest(sandbox_id, self.settings, identity, bash_timeout=self._bash_timeout)
            )
            self._namespace.create(service_manifest(sandbox_id, self.settings, identity))
            self._remember(sandbox_id, self._wait_ready(sandbox_id), token)
        return sandbox_id

    def sandbox_id_for(self, user_id: str, thread_id: str) -> str:
        return sandbox_id_for(user_id, thread_id)

    def get(self, sandbox_id: str) -> Sandbox | None:
        with self._lock:
            if (cached := self._sandboxes.get(sandbox_id)) is not None:
                return cached
        if not SANDBOX_ID_PATTERN.match(sandbox_id):
            return None  # another provider's id (e.g. ``local:…``): acquire a pod instead
        pod = self._namespace.read("Pod", pod_name(sandbox_id))
        if pod is None or pod.metadata.deletion_timestamp is not None or not readiness(pod)[0]:
            return None  # acquire creates it, adopts it or waits for it
        secret = self._namespace.read("Secret", secret_name(sandbox_id))
        if secret is None:
            return None
        return self._remember(sandbox_id, pod, _token_of(secret))

    def release(self, sandbox_id: str) -> None:
        """Delete the pod first: a pod without its Secret could never restart, a Secret alone is harmless."""
        self._forget(sandbox_id)
        if not SANDBOX_ID_PATTERN.match(sandbox_id):
            return
        self._namespace.delete("Pod", pod_name(sandbox_id))
        self._namespace.delete("Service", service_name(sandbox_id))
        self._namespace.delete("Secret", secret_name(sandbox_id))

    # -- for the sweeper and operators ---------------------------------------------------------------------

    def inventory(self) -> list[SandboxRecord]:
        records = []
        for pod in self._namespace.list_pods(SANDBOX_SELECTOR):
            meta = pod.metadata
            labels = (meta.labels if meta else None) or {}
            # Filtered here too: the selector is an optimisation some API servers (and emulators) ignore.
            if meta is None or any(labels.get(key) != value for key, value in COMMON_LABELS.items()):
                continue
            annotations = meta.annotations or {}
            created = meta.creation_timestamp
            if created is None and annotations.get(CREATED_AT_ANNOTATION):
                created = datetime.fromisoformat(annotations[CREATED_AT_ANNOTATION])
            records.append(
                SandboxRecord(
                    sandbox_id=labels.get(SANDBOX_ID_LABEL, ""),
                    pod=str(meta.name),
                    user_id=annotations.get(USER_ID_ANNOTATION, ""),
                    thread_id=annotations.get(THREAD_ID_ANNOTATION, ""),
                    workflow_id=annotations.get(WORKFLOW_ID_ANNOTATION, ""),
                    created_at=created,
                    ready=readiness(pod)[0],
                )
            )
        return sorted(records, key=lambda record: record.pod)

    # -- acquiring --------------------------------------------------------------------------------------------

    def _create_or_adopt_secret(self, sandbox_id: str, identity: dict[str, str]) -> str:
        """The token of the Secret created now, or of the one that already existed."""
        token = secrets.token_urlsafe(32)
        if self._namespace.create(secret_manifest(sandbox_id, token, self.settings, identity)):
            return token
        existing = self._namespace.read("Secret", secret_name(sandbox_id))
        if existing is None:
            raise SandboxNotReadyError(f"secret {secret_name(sandbox_id)} vanished while acquiring; retrying")
        return _token_of(existing)

    def _create_or_adopt_pod(self, manifest: dict[str, Any]) -> None:
        """Create the pod; one that already exists is adopted unless it is terminating (then retry later)."""
        if self._namespace.create(manifest):
            return
        pod = self._namespace.read("Pod", manifest["metadata"]["name"])
        if pod is not None and pod.metadata.deletion_timestamp is not None:
            raise SandboxNotReadyError(f"sandbox pod {self._namespace.where(pod.metadata.name)} is still terminating")

    def _wait_ready(self, sandbox_id: str) -> Any:
        name = pod_name(sandbox_id)
        timeout = self.settings.ready_timeout_seconds
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            pod = self._namespace.read("Pod", name)
            if pod is None:
                raise SandboxNotReadyError(f"sandbox pod {self._namespace.where(name)} was deleted while starting")
            ready, condition = readiness(pod)
            if ready and (self.settings.endpoint == "service" or pod.status.pod_ip):
                return pod
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.release(sandbox_id)
                raise SandboxNotReadyError(
                    f"sandbox pod {self._namespace.where(name)} did not become ready within {timeout:g}s; "
                    f"last condition: {condition}"
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)

    # -- this worker's cache ----------------------------------------------------------------------------------

    def _remember(self, sandbox_id: str, pod: Any, token: str) -> RemoteSandbox:
        settings = self.settings
        if settings.endpoint == "pod_ip":
            host = pod.status.pod_ip
        else:
            host = f"{service_name(sandbox_id)}.{settings.namespace}.svc.{settings.cluster_domain}"
        sandbox = RemoteSandbox(
            f"http://{host}:{settings.container_port}",
            token,
            default_timeout=self._bash_timeout,
            on_unavailable=lambda: self._forget(sandbox_id),
        )
        with self._lock:
            self._sandboxes[sandbox_id] = sandbox
        return sandbox

    def _forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._sandboxes.pop(sandbox_id, None)
            self._acquiring.pop(sandbox_id, None)  # a waiter keeps its reference; only memory is reclaimed


def _token_of(secret: Any) -> str:
    if secret.data and secret.data.get("token"):
        return base64.b64decode(secret.data["token"]).decode()
    raise SandboxNotReadyError(f"secret {secret.metadata.name} has no token")


__all__ = ["KubernetesSandboxProvider", "SandboxNotReadyError"]
