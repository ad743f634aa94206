"""A kubernetes sandbox's objects as plain manifests: their names, labels and annotations, and the Secret, Pod and
Service the provider (``activities/sandbox/kubernetes.py``) creates. Pure: nothing here talks to a cluster.

Names derive from the sandbox id, DeerFlow's ``sha256("{user_id}:{thread_id}")[:16]``, so every worker finds the
same objects. Labels carry what selectors need (``app.kubernetes.io/*``, sandbox, thread and workflow ids,
shortened to label-value rules); annotations carry the exact user, thread and workflow ids and the creation time.
``scripts/check-k8s`` holds the pod built here to the cluster's admission rules.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import datetime
from typing import Any

from activities.sandbox.kubernetes_settings import KubernetesSandboxSettings
from activities.sandbox.remote import HEALTH_PATH, TOKEN_ENV
from vocabulary.paths import VIRTUAL_PATH_PREFIX, thread_dir

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
