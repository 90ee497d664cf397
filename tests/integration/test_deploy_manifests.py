"""The Dockerfile, Kubernetes manifests, dashboard and alert rules, validated offline (issue 8)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI") == "true"


def tool(name: str) -> str | None:
    found = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if found is None and IN_CI and name in ("hadolint", "kubernetes-validate"):
        pytest.fail(f"{name} must be installed in CI (it is a dev dependency)")
    return found


def rendered(overlay: str) -> list[dict]:
    """The overlay rendered by kustomize when kubectl is here, else the raw resources it lists."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run(
            [kubectl, "kustomize", str(K8S / "overlays" / overlay)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [d for d in yaml.safe_load_all(out) if d]
    docs = []
    for base in (K8S / "base", K8S / "overlays" / overlay):
        kust = yaml.safe_load((base / "kustomization.yaml").read_text())
        for res in kust.get("resources", []):
            if (base / res).is_file():
                docs += [d for d in yaml.safe_load_all((base / res).read_text()) if d]
    return docs


def test_dockerfile_passes_hadolint() -> None:
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed")
    res = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER \d+:\d+$", text, re.M)  # numeric non-root user
    assert re.search(r'^ENTRYPOINT \["agentmill"\]$', text, re.M)  # exec form: SIGTERM reaches the process
    assert "uv.lock" in text and (ROOT / ".dockerignore").exists()


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_core_manifests_validate_strictly(overlay: str, tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    if validate is None:
        pytest.skip("kubernetes-validate is not installed")
    docs = rendered(overlay)
    core = [d for d in docs if d["kind"] not in ("ScaledObject", "ServiceMonitor")]
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump_all(core))
    res = subprocess.run([validate, "--strict", "--quiet", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Secret", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
            "NetworkPolicy", "ScaledObject", "ServiceMonitor"} <= kinds  # fmt: skip
    if overlay == "dev":
        redis = next(d for d in docs if d["kind"] == "StatefulSet")
        assert "--appendonly" in redis["spec"]["template"]["spec"]["containers"][0]["args"]


def test_worker_pod_is_restricted_and_outlives_its_shutdown_grace() -> None:
    docs = rendered("prod")
    worker = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "agentmill-worker"
    )
    pod = worker["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert pod["terminationGracePeriodSeconds"] > float(env["AGENTMILL_SHUTDOWN_GRACE_S"])
    assert (
        pod["securityContext"]["runAsNonRoot"]
        and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )
    sc = c["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert any(v["mountPath"] == "/tmp" for v in c["volumeMounts"])
    assert (
        c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        and c["livenessProbe"]["httpGet"]["port"] == "metrics"
    )


@pytest.mark.parametrize(
    ("kind", "schema"), [("ScaledObject", "scaledobject.json"), ("ServiceMonitor", "servicemonitor.json")]
)
def test_crd_objects_match_their_schemas(kind: str, schema: str) -> None:
    spec = json.loads((ROOT / "tests" / "data" / "crd" / schema).read_text())
    objs = [d for d in rendered("prod") if d["kind"] == kind]
    assert objs
    for obj in objs:
        jsonschema.validate(obj, spec)
    broken = json.loads(json.dumps(objs[0]))
    broken["spec"]["unexpected"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, spec)


def known_metrics() -> set[str]:
    from prometheus_client import CollectorRegistry

    from producer.api.metrics import ApiMetrics
    from worker.health import HealthServer
    from worker.metrics import MetricsObserver

    names: set[str] = set()
    obs = MetricsObserver()
    HealthServer(obs.registry, obs.render)
    for registry in (obs.registry, ApiMetrics().registry, CollectorRegistry()):
        for fam in registry.collect():
            names.add(fam.name)
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(fam.type, [])
            names.update(fam.name + sfx for sfx in suffixes)
    return names


def referenced(text: str) -> set[str]:
    return set(re.findall(r"\bagentmill_[a-z_]+", text))


def test_dashboard_and_rules_use_only_metrics_that_exist() -> None:
    known = known_metrics()
    dash = (K8S / "base" / "agentmill-dashboard.json").read_text()
    json.loads(dash)
    rules = (K8S / "base" / "prometheus-rules.yaml").read_text()
    used = referenced(dash) | referenced(rules)
    assert used and used <= known, used - known
    titles = {p["title"] for p in json.loads(dash)["panels"]}
    for needed in (
        "Throughput",
        "Run outcomes",
        "Iterations",
        "retries",
        "Tool calls",
        "Queue depth",
        "Events",
        "awaiting approval",
    ):
        assert any(needed.lower() in t.lower() for t in titles), needed


def test_alert_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool") or (str(BIN / "promtool") if (BIN / "promtool").exists() else None)
    if promtool is None:
        pytest.skip(
            "promtool is not installed (Debian's prometheus package ships it; bin/dev test installs it)"
        )
    res = subprocess.run(
        [promtool, "check", "rules", str(K8S / "base" / "prometheus-rules.yaml")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
