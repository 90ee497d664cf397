"""The manifests are safe to apply to production: no overlay but dev ships a Secret, every process
that makes runs holds the ID secret, autoscaling holds the pool through an outage, the API's
/metrics gets its token, pods stop without dropping requests and spread out, the image is named
once, and every alert links a runbook section that exists."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from tests.support.manifests import (
    K8S,
    OVERLAYS,
    PRODUCTION,
    ROOT,
    env_of,
    kustomized,
    needs_kustomize,
    one,
    pod_templates,
    rendered,
)
from tests.unit.test_docs import anchors

pytestmark = pytest.mark.integration

# The Deployments and Jobs running an agentmill process that makes runs: the API (submissions, its
# firer) and the worker (its firer). Any new agentmill container must be listed here or below.
RUN_MAKERS = {"Deployment/agentmill-api", "Deployment/agentmill-worker"}
NOT_AGENTMILL = {"StatefulSet/agentmill-redis", "StatefulSet/agentmill-redis-cluster",
                 "Job/agentmill-redis-cluster-create"}  # fmt: skip


def secret_ref(container: dict, name: str) -> dict | None:
    entry = env_of(container).get(name, {})
    return entry.get("valueFrom", {}).get("secretKeyRef")


@pytest.mark.parametrize("overlay", PRODUCTION)
def test_no_production_overlay_ships_a_secret(overlay: str) -> None:
    """An apply must neither create a Secret with known values nor overwrite the operator's."""
    docs = rendered(overlay)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == []
    assert not any("change-me" in yaml.safe_dump(d) for d in docs)
    assert "secret.example.yaml" not in (K8S / "base" / "kustomization.yaml").read_text()


def test_the_dev_overlay_keeps_an_example_secret_with_every_key_the_pods_read() -> None:
    needs_kustomize()
    docs = rendered("dev")
    keys = set(one(docs, "Secret", "agentmill-secrets")["stringData"])
    read = set()
    for tpl in pod_templates(docs).values():
        for c in tpl["spec"]["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] == "agentmill-secrets":
                    read.add(ref["key"])
        for v in tpl["spec"].get("volumes", []):
            if v.get("secret", {}).get("secretName") == "agentmill-secrets":
                read.update(i["key"] for i in v["secret"]["items"])
    assert read <= keys, read - keys


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_process_that_makes_runs_holds_the_id_secret(overlay: str) -> None:
    templates = pod_templates(rendered(overlay))
    assert set(templates) >= RUN_MAKERS
    assert set(templates) - RUN_MAKERS <= NOT_AGENTMILL, set(templates) - RUN_MAKERS - NOT_AGENTMILL
    for name in RUN_MAKERS:
        [c] = templates[name]["spec"]["containers"]
        assert secret_ref(c, "AGENTMILL_ID_SECRET") == {
            "name": "agentmill-secrets",
            "key": "AGENTMILL_ID_SECRET",
        }, name
    for name in set(templates) - RUN_MAKERS:  # no agentmill image runs elsewhere
        assert all(not c["image"].startswith("agentmill") for c in templates[name]["spec"]["containers"]), (
            name
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_absent_scaling_series_never_scales_the_workers_in(overlay: str) -> None:
    needs_kustomize()
    so = one(rendered(overlay), "ScaledObject", "agentmill-worker")["spec"]
    [trigger] = so["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["ignoreNullValues"] == "false"
    fallback = so["fallback"]
    assert fallback["failureThreshold"] >= 1 and fallback["behavior"] == "currentReplicasIfHigher"
    assert fallback["replicas"] == so["minReplicaCount"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_api_gets_the_metrics_token_the_service_monitor_sends(overlay: str) -> None:
    docs = rendered(overlay)
    [endpoint] = one(docs, "ServiceMonitor", "agentmill")["spec"]["endpoints"]
    sent = endpoint["authorization"]["credentials"]
    api = one(docs, "Deployment", "agentmill-api")["spec"]["template"]["spec"]["containers"][0]
    assert secret_ref(api, "AGENTMILL_METRICS_TOKEN") == sent


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_stop_without_dropping_requests_and_spread_over_zones_and_nodes(overlay: str) -> None:
    docs = rendered(overlay)
    api = one(docs, "Deployment", "agentmill-api")["spec"]["template"]["spec"]
    command = api["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and int(command[1]) > 0
    # the exec hook needs /bin/sleep in the image: its runtime stage is Debian slim (coreutils)
    assert re.search(r"^FROM python:[\d.]+-slim-bookworm$", (ROOT / "Dockerfile").read_text(), re.M)
    # the grace covers the sleep and uvicorn's stop after it
    assert api["terminationGracePeriodSeconds"] >= int(command[1]) + 20
    for name in ("agentmill-api", "agentmill-worker"):
        pod = one(docs, "Deployment", name)["spec"]["template"]
        spread = pod["spec"]["topologySpreadConstraints"]
        assert {s["topologyKey"] for s in spread} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
        for s in spread:
            assert s["whenUnsatisfiable"] == "ScheduleAnyway", name  # a one-node cluster still schedules
            assert s["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), name


def test_an_overlay_overrides_the_image_of_both_deployments(tmp_path: Path) -> None:
    needs_kustomize()
    base = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    [image] = base["images"]
    for d in (d for d in rendered("prod") if d["kind"] == "Deployment"):
        assert (
            d["spec"]["template"]["spec"]["containers"][0]["image"] == f"{image['newName']}:{image['newTag']}"
        )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({
            "resources": [os.path.relpath(K8S / "overlays" / "prod", tmp_path)],
            "images": [{"name": image["name"], "newName": "registry.example/agentmill", "newTag": "9.9.9"}],
        })
    )  # fmt: skip
    images = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in kustomized(tmp_path)
        if d["kind"] == "Deployment"
    }
    assert images == dict.fromkeys(("agentmill-api", "agentmill-worker"), "registry.example/agentmill:9.9.9")


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    groups = yaml.safe_load((K8S / "base" / "prometheus-rules.yaml").read_text())["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    sections = anchors(ROOT / "docs" / "operations.md")
    assert alerts
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]
        m = re.fullmatch(r"docs/operations\.md#([\w-]+)", url)
        assert m and m.group(1) in sections, (rule["alert"], url)
        assert m.group(1) == rule["alert"].lower(), url  # its own section, named after it
