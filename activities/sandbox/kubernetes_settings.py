"""``sandbox.kubernetes`` in hartflow.yaml: where and how the kubernetes provider runs sandbox pods.

Read by ``workers/config.py``; the pods built from it are in ``activities/sandbox/kubernetes_manifests.py``, the
provider that creates them in ``activities/sandbox/kubernetes.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
