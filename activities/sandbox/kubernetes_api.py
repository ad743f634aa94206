"""The Kubernetes API calls of the kubernetes sandbox provider (``activities/sandbox/kubernetes.py``), in its
namespace, through the official client.

Every call carries a request timeout, and the status codes the provider relies on are answers rather than errors
here: a 409 on create means the object already exists (``False``, the provider adopts it), a 404 on read means it
does not (``None``), a 404 on delete means it is already gone. ``readiness`` puts a returned pod's state in words.
These calls are exactly what ``k8s/base/worker-rbac.yaml`` grants the worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from activities.sandbox.kubernetes_settings import KubernetesSandboxSettings

Kind = Literal["Pod", "Service", "Secret"]

_REQUEST_TIMEOUT = 30


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


class SandboxNamespace:
    """The namespace the sandboxes live in; ``api`` is an ``ApiClient`` (default: one built from ``settings``)."""

    def __init__(self, settings: KubernetesSandboxSettings, api: Any | None = None) -> None:
        self.name = settings.namespace
        core = k8s.CoreV1Api(api if api is not None else api_client(settings))
        self._core = core
        self._create: dict[str, Callable[..., Any]] = {
            "Pod": core.create_namespaced_pod,
            "Service": core.create_namespaced_service,
            "Secret": core.create_namespaced_secret,
        }
        self._read: dict[str, Callable[..., Any]] = {
            "Pod": core.read_namespaced_pod,
            "Secret": core.read_namespaced_secret,
        }
        self._delete: dict[str, Callable[..., Any]] = {
            "Pod": core.delete_namespaced_pod,
            "Service": core.delete_namespaced_service,
            "Secret": core.delete_namespaced_secret,
        }

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create ``manifest``; ``False`` when an object of its kind and name already exists (409)."""
        try:
            self._create[manifest["kind"]](self.name, manifest, _request_timeout=_REQUEST_TIMEOUT)
            return True
        except ApiException as e:
            if e.status != 409:
                raise
        return False

    def read(self, kind: Literal["Pod", "Secret"], name: str) -> Any:
        """The object (a V1Pod or V1Secret), or ``None`` when there is none (404)."""
        try:
            return self._read[kind](name, self.name, _request_timeout=_REQUEST_TIMEOUT)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def delete(self, kind: Kind, name: str) -> None:
        """Delete the object; one that is already gone (404) counts as deleted."""
        try:
            self._delete[kind](name, self.name, _request_timeout=_REQUEST_TIMEOUT)
        except ApiException as e:
            if e.status != 404:
                raise

    def list_pods(self, label_selector: str) -> list[Any]:
        return list(
            self._core.list_namespaced_pod(
                self.name, label_selector=label_selector, _request_timeout=_REQUEST_TIMEOUT
            ).items
        )

    def where(self, name: str) -> str:
        """``namespace/name``, for messages."""
        return f"{self.name}/{name}"


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
