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

Labels carry what selectors need (``app.kubernetes.io/*``, sandbox, thread and workflow ids, shortened to
label-value rules); annotations carry the exact user, thread and workflow ids and the creation time.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any, Literal

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field

from activities.sandbox.base import Sandbox, SandboxError, SandboxProvider
from activities.sandbox.remote import HEALTH_PATH, TOKEN_ENV, RemoteSandbox
from vocabulary.contracts import SandboxRecord
from vocabulary.paths import VIRTUAL_PATH_PREFIX, InvalidIdError, thread_dir

# -- configuration (``sandbox.kubernetes`` in hartflow.yaml) ------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SandboxResources(_Strict):
    """DeerFlow's provisioner defaults (``bytedance/deer-flow: docker/provisioner/app.py``)."""

    requests: dict[str, str] = Field(
        default_factory=lambda: {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "500Mi"}
    )
    limits: dict[str, str] = Field(
        default_factory=lambda: {"cpu": "1000m", "memory": "1Gi", "ephemeral-storage": "500Mi"}
    )


class KubernetesSandboxSettings(_Strict):
    namespace: str = Field("hartflow-sandboxes", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    image: str = Field("hartflow-sandbox:0.1.0", min_length=1, description="built from k8s/Dockerfile")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    api_server: str | None = Field(
        None, description="API server URL used as is, without credentials (kubectl proxy, emulators)"
    )
    in_cluster: bool | None = Field(
        None, description="use the pod's service account; unset: when $KUBERNETES_SERVICE_HOST is set"
    )
    kubeconfig: str | None = Field(None, description="kubeconfig file when not in-cluster (default ~/.kube/config)")
    context: str | None = None
    endpoint: Literal["service", "pod_ip"] = Field(
        "service", description="reach the sandbox through its ClusterIP Service's DNS name or the pod IP"
    )
    cluster_domain: str = "cluster.local"
    container_port: int = Field(8080, ge=1, le=65535)
    ready_timeout_seconds: float = Field(60, gt=0, description="DeerFlow waits 60 s for a new sandbox")
    resources: SandboxResources = Field(default_factory=SandboxResources)
    user_data_claim: str | None = Field(
        None,
        description="PVC for /mnt/user-data (subPath users/{user}/threads/{thread}/user-data), so files outlive "
        "the pod; unset: an emptyDir that lives as long as the pod",
    )
    max_output_bytes: int = Field(10 * 1024 * 1024, gt=0, description="kept per output stream of a command")
    max_age_seconds: float = Field(24 * 3600, gt=0, description="the sweeper deletes older sandbox pods")
    sweep_interval_seconds: float = Field(300, gt=0, description="how often the sweeper schedule runs")


# -- names, labels, manifests (pure) ------------------------------------------------------------------------

SANDBOX_ID_PATTERN = re.compile(r"^[0-9a-f]{16}$")
CONTAINER_NAME = "sandbox"
SANDBOX_UID = 1000
"""The sandbox image's non-root user (k8s/Dockerfile)."""

SANDBOX_ID_LABEL = "hartflow.dev/sandbox-id"
THREAD_ID_LABEL = "hartflow.dev/thread-id"
WORKFLOW_ID_LABEL = "hartflow.dev/workflow-id"
USER_ID_ANNOTATION = "hartflow.dev/user-id"
THREAD_ID_ANNOTATION = "hartflow.dev/thread-id"
WORKFLOW_ID_ANNOTATION = "hartflow.dev/workflow-id"
CREATED_AT_ANNOTATION = "hartflow.dev/created-at"
COMMON_LABELS = {
    "app.kubernetes.io/name": "hartflow",
    "app.kubernetes.io/component": "sandbox",
    "app.kubernetes.io/part-of": "hartflow",
    "app.kubernetes.io/managed-by": "hartflow-worker",
}
SANDBOX_SELECTOR = ",".join(f"{key}={value}" for key, value in COMMON_LABELS.items())

_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def sandbox_id_for(user_id: str, thread_id: str) -> str:
    return hashlib.sha256(f"{user_id}:{thread_id}".encode()).hexdigest()[:16]


def pod_name(sandbox_id: str) -> str:
    return f"sandbox-{sandbox_id}"


def service_name(sandbox_id: str) -> str:
    return f"sandbox-{sandbox_id}-svc"


def secret_name(sandbox_id: str) -> str:
    return f"sandbox-{sandbox_id}-token"


def label_value(value: str) -> str:
    """``value`` if Kubernetes accepts it as a label value, else a readable prefix plus a hash of it."""
    if _LABEL_VALUE.match(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:52].strip("-_.")
    return f"{head}-{digest}" if head else digest


def _metadata(
    name: str, sandbox_id: str, settings: KubernetesSandboxSettings, identity: dict[str, str]
) -> dict[str, Any]:
    labels = {**COMMON_LABELS, "app.kubernetes.io/instance": pod_name(sandbox_id), SANDBOX_ID_LABEL: sandbox_id}
    labels[THREAD_ID_LABEL] = label_value(identity[THREAD_ID_ANNOTATION])
    if identity.get(WORKFLOW_ID_ANNOTATION):
        labels[WORKFLOW_ID_LABEL] = label_value(identity[WORKFLOW_ID_ANNOTATION])
    # The namespace goes in the body too: watches filter on it (and kmock only sees it there).
    return {"name": name, "namespace": settings.namespace, "labels": labels, "annotations": dict(identity)}


def identity_annotations(user_id: str, thread_id: str, workflow_id: str, created_at: datetime) -> dict[str, str]:
    annotations = {
        USER_ID_ANNOTATION: user_id,
        THREAD_ID_ANNOTATION: thread_id,
        CREATED_AT_ANNOTATION: created_at.isoformat(),
    }
    if workflow_id:
        annotations[WORKFLOW_ID_ANNOTATION] = workflow_id
    return annotations


def secret_manifest(
    sandbox_id: str, token: str, settings: KubernetesSandboxSettings, identity: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(secret_name(sandbox_id), sandbox_id, settings, identity),
        "type": "Opaque",
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }


def pod_manifest(
    sandbox_id: str, settings: KubernetesSandboxSettings, identity: dict[str, str], *, bash_timeout: float
) -> dict[str, Any]:
    probe = {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "timeoutSeconds": 3, "failureThreshold": 3}
    user_data_mount: dict[str, Any] = {"name": "user-data", "mountPath": VIRTUAL_PATH_PREFIX}
    if settings.user_data_claim:
        user_data_volume: dict[str, Any] = {
            "name": "user-data",
            "persistentVolumeClaim": {"claimName": settings.user_data_claim},
        }
        thread = thread_dir(identity[USER_ID_ANNOTATION], identity[THREAD_ID_ANNOTATION])
        user_data_mount["subPath"] = f"{thread}/user-data"
    else:
        user_data_volume = {"name": "user-data", "emptyDir": {}}
    env = [
        {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": secret_name(sandbox_id), "key": "token"}}},
        {"name": "HARTFLOW_SANDBOX_PORT", "value": str(settings.container_port)},
        {"name": "HARTFLOW_SANDBOX_BASH_TIMEOUT", "value": f"{bash_timeout:g}"},
        {"name": "HARTFLOW_SANDBOX_MAX_OUTPUT_BYTES", "value": str(settings.max_output_bytes)},
        {"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(pod_name(sandbox_id), sandbox_id, settings, identity),
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,  # no other services' addresses in the sandbox's environment
            "restartPolicy": "Always",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": SANDBOX_UID,
                "runAsGroup": SANDBOX_UID,
                "fsGroup": SANDBOX_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": CONTAINER_NAME,
                    "image": settings.image,
                    "imagePullPolicy": settings.image_pull_policy,
                    "ports": [{"name": "http", "containerPort": settings.container_port, "protocol": "TCP"}],
                    "env": env,
                    # The server is up in well under a second: DeerFlow's 5 s initial delay would only add 5 s
                    # to every first tool call.
                    "readinessProbe": {**probe, "periodSeconds": 2},
                    "livenessProbe": {**probe, "initialDelaySeconds": 10, "periodSeconds": 10},
                    "resources": {"requests": settings.resources.requests, "limits": settings.resources.limits},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [user_data_mount, {"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [user_data_volume, {"name": "tmp", "emptyDir": {}}],
        },
    }


def service_manifest(sandbox_id: str, settings: KubernetesSandboxSettings, identity: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(service_name(sandbox_id), sandbox_id, settings, identity),
        "spec": {
            "type": "ClusterIP",
            "selector": {SANDBOX_ID_LABEL: sandbox_id},
            "ports": [{"name": "http", "port": settings.container_port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def readiness(pod: Any) -> tuple[bool, str]:
    """Whether ``pod`` (a V1Pod) is Ready, and its last condition in words for error messages."""
    status = pod.status
    if status is None:
        return False, "no status reported yet (not scheduled?)"
    details = []
    for container in status.container_statuses or []:
        waiting = container.state.waiting if container.state is not None else None
        if waiting is not None and waiting.reason:
            details.append(f"container {container.name} waiting: {waiting.reason}" + _colon(waiting.message))
    for condition in status.conditions or []:
        if condition.type == "Ready":
            text = f"Ready={condition.status}" + (f" ({condition.reason})" if condition.reason else "")
            text += _colon(condition.message)
            return condition.status == "True", "; ".join([text, *details])
    return False, "; ".join([f"phase {status.phase or 'unknown'}, no Ready condition yet", *details])


def _colon(message: str | None) -> str:
    return f": {message}" if message else ""


# -- the provider -------------------------------------------------------------------------------------------


class SandboxNotReadyError(RuntimeError):
    """A sandbox pod that did not become Ready in time (or is still terminating): retried by the activity."""


def api_client(settings: KubernetesSandboxSettings) -> Any:
    configuration = k8s.Configuration()
    if settings.api_server:
        configuration.host = settings.api_server.rstrip("/")
    elif settings.in_cluster if settings.in_cluster is not None else "KUBERNETES_SERVICE_HOST" in os.environ:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=settings.kubeconfig, context=settings.context, client_configuration=configuration
        )
    return k8s.ApiClient(configuration)


_API_TIMEOUT = 30


class KubernetesSandboxProvider(SandboxProvider):
    uses_thread_data_mounts = False

    def __init__(
        self, settings: KubernetesSandboxSettings, *, bash_timeout: float = 600, api: Any | None = None
    ) -> None:
        self.settings = settings
        self._core = k8s.CoreV1Api(api if api is not None else api_client(settings))
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
            token = self._ensure_secret(sandbox_id, identity)
            pod = pod_manifest(sandbox_id, self.settings, identity, bash_timeout=self._bash_timeout)
            self._ensure(self._core.create_namespaced_pod, pod)
            self._ensure(self._core.create_namespaced_service, service_manifest(sandbox_id, self.settings, identity))
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
        pod = self._read(self._core.read_namespaced_pod, pod_name(sandbox_id))
        if pod is None or pod.metadata.deletion_timestamp is not None or not readiness(pod)[0]:
            return None  # acquire creates it, adopts it or waits for it
        secret = self._read(self._core.read_namespaced_secret, secret_name(sandbox_id))
        if secret is None:
            return None
        return self._remember(sandbox_id, pod, _token_of(secret))

    def release(self, sandbox_id: str) -> None:
        """Delete the pod first: a pod without its Secret could never restart, a Secret alone is harmless."""
        self._forget(sandbox_id)
        if not SANDBOX_ID_PATTERN.match(sandbox_id):
            return
        namespace = self.settings.namespace
        for delete, name in (
            (self._core.delete_namespaced_pod, pod_name(sandbox_id)),
            (self._core.delete_namespaced_service, service_name(sandbox_id)),
            (self._core.delete_namespaced_secret, secret_name(sandbox_id)),
        ):
            try:
                delete(name, namespace, _request_timeout=_API_TIMEOUT)
            except ApiException as e:
                if e.status != 404:  # 404: already gone, which is what release wants
                    raise

    # -- for the sweeper and operators ---------------------------------------------------------------------

    def inventory(self) -> list[SandboxRecord]:
        pods = self._core.list_namespaced_pod(
            self.settings.namespace, label_selector=SANDBOX_SELECTOR, _request_timeout=_API_TIMEOUT
        )
        records = []
        for pod in pods.items:
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

    # -- internals ----------------------------------------------------------------------------------------

    def _ensure_secret(self, sandbox_id: str, identity: dict[str, str]) -> str:
        token = secrets.token_urlsafe(32)
        manifest = secret_manifest(sandbox_id, token, self.settings, identity)
        if self._ensure(self._core.create_namespaced_secret, manifest):
            return token
        existing = self._read(self._core.read_namespaced_secret, secret_name(sandbox_id))
        if existing is None:
            raise SandboxNotReadyError(f"secret {secret_name(sandbox_id)} vanished while acquiring; retrying")
        return _token_of(existing)

    def _ensure(self, create: Any, manifest: dict[str, Any]) -> bool:
        """Create ``manifest``; ``False`` when it already existed (409) and is adopted instead."""
        try:
            create(self.settings.namespace, manifest, _request_timeout=_API_TIMEOUT)
            return True
        except ApiException as e:
            if e.status != 409:
                raise
        if manifest["kind"] == "Pod":
            pod = self._read(self._core.read_namespaced_pod, manifest["metadata"]["name"])
            if pod is not None and pod.metadata.deletion_timestamp is not None:
                raise SandboxNotReadyError(f"sandbox pod {self._where(pod.metadata.name)} is still terminating")
        return False

    def _wait_ready(self, sandbox_id: str) -> Any:
        name = pod_name(sandbox_id)
        timeout = self.settings.ready_timeout_seconds
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            pod = self._read(self._core.read_namespaced_pod, name)
            if pod is None:
                raise SandboxNotReadyError(f"sandbox pod {self._where(name)} was deleted while starting")
            ready, condition = readiness(pod)
            if ready and (self.settings.endpoint == "service" or pod.status.pod_ip):
                return pod
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.release(sandbox_id)
                raise SandboxNotReadyError(
                    f"sandbox pod {self._where(name)} did not become ready within {timeout:g}s; "
                    f"last condition: {condition}"
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)

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

    def _read(self, read: Any, name: str) -> Any:
        try:
            return read(name, self.settings.namespace, _request_timeout=_API_TIMEOUT)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _where(self, name: str) -> str:
        return f"{self.settings.namespace}/{name}"


def _token_of(secret: Any) -> str:
    if secret.data and secret.data.get("token"):
        return base64.b64decode(secret.data["token"]).decode()
    raise SandboxNotReadyError(f"secret {secret.metadata.name} has no token")


__all__ = [
    "KubernetesSandboxProvider",
    "KubernetesSandboxSettings",
    "SandboxNotReadyError",
    "SandboxResources",
    "sandbox_id_for",
]
