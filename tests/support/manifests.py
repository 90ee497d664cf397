"""The Kubernetes manifests as an overlay renders them, for the tests that check them."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ["dev", "prod", "cluster-managed", "cluster-selfhosted"]
PRODUCTION = ["prod", "cluster-managed", "cluster-selfhosted"]


def rendered(overlay: str) -> list[dict[str, Any]]:
    """The overlay rendered by kustomize when kubectl is here, else the raw resources it lists."""
    if shutil.which("kubectl"):
        return kustomized(K8S / "overlays" / overlay)
    docs: list[dict[str, Any]] = []
    for base in (K8S / "base", K8S / "overlays" / overlay):
        kust = yaml.safe_load((base / "kustomization.yaml").read_text())
        for res in kust.get("resources", []):
            if (base / res).is_file():
                docs += [d for d in yaml.safe_load_all((base / res).read_text()) if d]
    return docs


def kustomized(path: Path) -> list[dict[str, Any]]:
    """The kustomization at ``path`` as `kubectl kustomize` renders it (a fresh copy each call)."""
    return [d for d in yaml.safe_load_all(_kustomize(str(path))) if d]


@functools.cache
def _kustomize(path: str) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    res = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def needs_kustomize() -> None:
    """The overlays' patches (replicas, env, Secret) are applied only when kubectl renders them."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: the overlays' patches cannot be applied")


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_templates(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod template of every Deployment, StatefulSet and Job, by kind/name."""
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet", "Job")
    }


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}
