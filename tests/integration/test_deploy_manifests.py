"""The Dockerfile, Kubernetes manifests, dashboard and alert rules, validated offline."""

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

from tests.support.manifests import K8S, OVERLAYS, ROOT, env_of, needs_kustomize, one, pod_templates, rendered

BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI") == "true"
CLUSTER_OVERLAYS = ["cluster-managed", "cluster-selfhosted"]
CLUSTER_ENV = {
    "AGENTMILL_REDIS_CLUSTER": "true",
    "AGENTMILL_PARTITIONS": "32",
    "AGENTMILL_REDIS_WAIT_REPLICAS": "1",
}
CRD_KINDS = ("ScaledObject", "ServiceMonitor", "PrometheusRule")
REDIS_NODES = [f"agentmill-redis-cluster-{i}.agentmill-redis-cluster:6379" for i in range(6)]


def tool(name: str) -> str | None:
    found = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if found is None and IN_CI and name in ("hadolint", "kubernetes-validate"):
        pytest.fail(f"{name} must be installed in CI (it is a dev dependency)")
    return found


def selects(selector: dict, labels: dict) -> bool:
    """A NetworkPolicy/PDB label selector (matchLabels only, as these manifests use) over labels."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def test_dockerfile_passes_hadolint() -> None:
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed")
    res = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER \d+:\d+$", text, re.M)  # numeric non-root user
    assert re.search(r'^ENTRYPOINT \["agentmill"\]$', text, re.M)  # exec form: SIGTERM reaches the process
    assert re.search(r"^\s+AGENTMILL_API_HOST=0\.0\.0\.0$", text, re.M)  # `docker run -p` reaches the API
    assert "uv.lock" in text and (ROOT / ".dockerignore").exists()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_core_manifests_validate_strictly(overlay: str, tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    if validate is None:
        pytest.skip("kubernetes-validate is not installed")
    docs = rendered(overlay)
    core = [d for d in docs if d["kind"] not in CRD_KINDS]
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump_all(core))
    res = subprocess.run([validate, "--strict", "--quiet", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
            "NetworkPolicy", *CRD_KINDS} <= kinds  # fmt: skip
    assert ("Secret" in kinds) == (overlay == "dev")  # the operator creates production's (test_deploy_safety)
    redis = [d for d in docs if d["kind"] == "StatefulSet"]
    assert len(redis) == (overlay in ("dev", "cluster-selfhosted"))  # the others bring their own Redis
    for sts in redis:
        c = sts["spec"]["template"]["spec"]["containers"][0]
        assert "--appendonly yes" in " ".join(c.get("command", []) + c.get("args", []))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_restricted(overlay: str) -> None:
    """The namespace enforces the restricted Pod Security Standard: a pod that breaks it is refused."""
    docs = rendered(overlay)
    ns = next(d for d in docs if d["kind"] == "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    templates = pod_templates(docs)
    assert {"Deployment/agentmill-api", "Deployment/agentmill-worker"} <= set(templates)
    for name, tpl in templates.items():
        pod = tpl["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), name
        assert all("hostPath" not in v for v in pod.get("volumes", [])), name
        for c in pod["containers"] + pod.get("initContainers", []):
            assert c["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }, (name, c["name"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_worker_pod_is_restricted_and_outlives_its_drain(overlay: str) -> None:
    docs = rendered(overlay)
    worker = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "agentmill-worker"
    )
    pod = worker["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    # the drain timeout, then up to 10 s cancelling what remains and handing the runs back, and exit
    assert pod["terminationGracePeriodSeconds"] >= float(env["AGENTMILL_DRAIN_TIMEOUT_S"]) + 15
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}  # 503 while starting
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


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize(
    ("kind", "schema"), [("ScaledObject", "scaledobject.json"), ("ServiceMonitor", "servicemonitor.json")]
)
def test_crd_objects_match_their_schemas(kind: str, schema: str, overlay: str) -> None:
    spec = json.loads((ROOT / "tests" / "data" / "crd" / schema).read_text())
    objs = [d for d in rendered(overlay) if d["kind"] == kind]
    assert objs
    for obj in objs:
        jsonschema.validate(obj, spec)
    broken = json.loads(json.dumps(objs[0]))
    broken["spec"]["unexpected"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, spec)


@pytest.mark.parametrize("overlay", CLUSTER_OVERLAYS)
def test_cluster_overlays_set_the_cluster_settings_on_the_worker_and_the_api(overlay: str) -> None:
    needs_kustomize()
    docs, prod = rendered(overlay), rendered("prod")
    for name in ("agentmill-worker", "agentmill-api"):
        dep = one(docs, "Deployment", name)
        env = env_of(dep["spec"]["template"]["spec"]["containers"][0])
        assert {k: env[k].get("value") for k in CLUSTER_ENV if k in env} == CLUSTER_ENV, name
        assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "agentmill-secrets",
            "key": "REDIS_URL",
        }
    for kind, name, field in AUTOSCALERS:  # the same sizes as prod
        assert one(docs, kind, name)["spec"][field] == one(prod, kind, name)["spec"][field], name
    for plain in ("dev", "prod"):  # the single-Redis overlays stay single-Redis
        for d in rendered(plain):
            if d["kind"] == "Deployment":
                assert not set(CLUSTER_ENV) & set(env_of(d["spec"]["template"]["spec"]["containers"][0]))


AUTOSCALERS = [
    ("ScaledObject", "agentmill-worker", "minReplicaCount"),
    ("HorizontalPodAutoscaler", "agentmill-api", "minReplicas"),
]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_autoscaled_deployments_set_no_replicas(overlay: str) -> None:
    """The HPA and KEDA own the replica count: a Deployment's replicas would be applied over theirs
    on every `kubectl apply` (each deploy would scale the pool back)."""
    needs_kustomize()
    docs = rendered(overlay)
    targets = {
        d["spec"]["scaleTargetRef"]["name"]
        for d in docs
        if d["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")
    }
    assert targets == {"agentmill-worker", "agentmill-api"}
    for name in targets:
        assert "replicas" not in one(docs, "Deployment", name)["spec"], name
    so = one(docs, "ScaledObject", "agentmill-worker")["spec"]
    # cooldownPeriod acts only when scaling to zero: with a minimum of 1 the HPA's window paces scale-in
    assert so["minReplicaCount"] >= 1 and "cooldownPeriod" not in so
    assert (
        so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
        > 0
    )
    [trigger] = so["triggers"]
    namespace = one(docs, "Namespace", "agentmill")["metadata"]["name"]
    assert trigger["metadata"]["query"] == f'max(agentmill_worker_slots_wanted{{namespace="{namespace}"}})'
    assert all(
        d["metadata"].get("namespace", namespace) == namespace for d in docs if d["kind"] != "Namespace"
    )


def test_api_serves_metrics_on_its_own_port_scraped_by_prometheus() -> None:
    docs = rendered("prod")
    api = one(docs, "Deployment", "agentmill-api")["spec"]["template"]["spec"]["containers"][0]
    assert env_of(api)["AGENTMILL_API_METRICS_PORT"]["value"] == "9464"
    assert {"name": "metrics", "containerPort": 9464} in api["ports"]
    svc = one(docs, "Service", "agentmill-api")
    assert {"name": "metrics", "port": 9464, "targetPort": "metrics"} in svc["spec"]["ports"]
    monitor = one(docs, "ServiceMonitor", "agentmill")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]  # the API's and the workers'


def test_selfhosted_cluster_is_6_nodes_joined_by_a_create_job() -> None:
    needs_kustomize()
    docs = rendered("cluster-selfhosted")
    sts = one(docs, "StatefulSet", "agentmill-redis-cluster")
    assert sts["spec"]["replicas"] == 6
    worker = one(docs, "Deployment", "agentmill-worker")["spec"]["template"]["spec"]["containers"][0]
    masters = sts["spec"]["replicas"] // 2  # one replica each
    assert int(env_of(worker)["AGENTMILL_PARTITIONS"]["value"]) >= max(16, 4 * masters)
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert selects(sts["spec"]["selector"], labels)
    svc = one(docs, "Service", sts["spec"]["serviceName"])
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    assert {p["port"] for p in svc["spec"]["ports"]} == {6379, 16379}
    [c] = sts["spec"]["template"]["spec"]["containers"]
    script = " ".join(c["command"] + c["args"])
    for flag in (
        "--cluster-enabled yes",
        "--cluster-config-file /data/nodes.conf",
        "--cluster-node-timeout 5000",
        "--appendonly yes",
        "--appendfsync everysec",
        '--requirepass "${REDIS_PASSWORD}"',
        '--masterauth "${REDIS_PASSWORD}"',
        '--cluster-announce-hostname "${POD_NAME}.agentmill-redis-cluster"',
        "--cluster-preferred-endpoint-type hostname",
    ):
        assert flag in script, flag
    env = env_of(c)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    password_ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert {v["mountPath"] for v in c["volumeMounts"]} == {"/data"}
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    [pdb] = [d for d in docs if d["kind"] == "PodDisruptionBudget" and selects(d["spec"]["selector"], labels)]
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": sts["spec"]["selector"]}

    job = one(docs, "Job", "agentmill-redis-cluster-create")
    [jc] = job["spec"]["template"]["spec"]["containers"]
    assert jc["command"] == ["sh", "-c"]
    script, _argv0, *nodes = jc["args"]
    assert nodes == REDIS_NODES  # 6 pods, by their stable DNS names
    assert nodes[0].rsplit(":", 1)[0] == f"{sts['metadata']['name']}-0.{svc['metadata']['name']}"
    create = [ln.strip() for ln in script.splitlines() if "--cluster create" in ln]
    assert create == ['redis-cli --cluster create "$@" --cluster-replicas 1 --cluster-yes -a "${REDIS_PASSWORD}" --no-auth-warning']  # fmt: skip
    assert env_of(jc)["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == password_ref
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"

    # The Redis password's Secret is the operator's, created before the first apply, as agentmill-secrets.
    assert password_ref == {"name": "agentmill-redis-cluster", "key": "REDIS_PASSWORD"}
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_only_the_api_the_workers_and_the_cluster_itself_reach_redis() -> None:
    needs_kustomize()
    docs = rendered("cluster-selfhosted")
    templates = pod_templates(docs)
    stranger = {"app.kubernetes.io/name": "stranger"}  # any other pod of the namespace
    templates["Pod/stranger"] = {"metadata": {"labels": stranger}}
    redis = templates["StatefulSet/agentmill-redis-cluster"]["metadata"]["labels"]
    allowed: dict[int, set[str]] = {}  # port -> pod templates let in
    for pol in (d for d in docs if d["kind"] == "NetworkPolicy"):
        if not selects(pol["spec"]["podSelector"], redis):
            continue
        assert pol["spec"]["policyTypes"] == ["Ingress"]
        for rule in pol["spec"]["ingress"]:
            assert rule.get("from") and rule.get("ports"), pol["metadata"]["name"]  # never from anywhere
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, peer  # pods of this namespace only
                pods = {
                    n for n, t in templates.items() if selects(peer["podSelector"], t["metadata"]["labels"])
                }
                for port in rule["ports"]:
                    allowed.setdefault(port["port"], set()).update(pods)
    assert allowed == {
        6379: {
            "Deployment/agentmill-api",
            "Deployment/agentmill-worker",
            "StatefulSet/agentmill-redis-cluster",
            "Job/agentmill-redis-cluster-create",
        },
        16379: {"StatefulSet/agentmill-redis-cluster"},
    }


def known_metrics() -> set[str]:
    from prometheus_client import CollectorRegistry

    from producer.api.metrics import ApiMetrics
    from producer.gauges import ClusterGauges
    from worker.process.health import HealthServer
    from worker.telemetry.metrics import MetricsObserver

    names: set[str] = set()
    obs = MetricsObserver()
    HealthServer(obs.registry, obs.render)
    api = ApiMetrics()
    api.cluster.reading = ClusterGauges(0, 0, 0, 0)  # the gauges read from Redis at a scrape
    for registry in (obs.registry, api.registry, CollectorRegistry()):
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


def test_prometheus_rule_is_generated_from_the_rule_file() -> None:
    res = subprocess.run(
        [sys.executable, str(K8S / "prometheus_rule.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    plain = yaml.safe_load((K8S / "base" / "prometheus-rules.yaml").read_text())
    for overlay in OVERLAYS:
        rule = one(rendered(overlay), "PrometheusRule", "agentmill")
        assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["spec"] == plain


def test_alerts_name_their_cause() -> None:
    """The API being down is not reported as a worker's missing heartbeat, and the jobs the alerts
    watch are the Services the ServiceMonitor scrapes."""
    groups = yaml.safe_load((K8S / "base" / "prometheus-rules.yaml").read_text())["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    services = {d["metadata"]["name"] for d in rendered("prod") if d["kind"] == "Service"}
    api, worker = alerts["AgentmillApiDown"], alerts["AgentmillWorkerDown"]
    assert 'job="agentmill-api"' in api["expr"] and "API" in api["annotations"]["summary"]
    assert 'job="agentmill-worker-metrics"' in worker["expr"] and "worker" in worker["annotations"]["summary"]
    assert {"agentmill-api", "agentmill-worker-metrics"} <= services
    beat = alerts["AgentmillWorkerHeartbeatMissing"]
    assert "up{" not in beat["expr"] and "heartbeat" in beat["expr"]
    records = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    assert {
        "agentmill:runs_started:rate5m",
        "agentmill:runs_finished_by_status:rate5m",
        "agentmill:tool_calls:rate5m",
    } <= records


def promtool() -> str:
    found = shutil.which("promtool") or (str(BIN / "promtool") if (BIN / "promtool").exists() else None)
    if found is None:
        pytest.skip(
            "promtool is not installed (Debian's prometheus package ships it; bin/dev test installs it)"
        )
    return found


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    rule = one(rendered("prod"), "PrometheusRule", "agentmill")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(rule["spec"]))  # the operator's object: its spec is a rule file
    for path in (K8S / "base" / "prometheus-rules.yaml", spec):
        res = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
