"""The deploy files read as their tools read them: every Kubernetes manifest valid (strictly)
against the API's schemas, the kustomizations naming files that are there, the Deployment
non-root with its probes, and the compose file wired as docs/deploy.md says."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import yaml

from tests.helpers import ROOT

KUBE = ROOT / "deploy" / "kube"
K8S_VERSION = "1.31.0"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_manifest_is_valid_against_the_kubernetes_schemas():
    checked = 0
    for path in sorted(KUBE.rglob("*.yaml")):
        for doc in _docs(path):
            if doc["kind"] == "Kustomization":
                for res in doc["resources"]:
                    assert (path.parent / res).exists(), (path, res)
                continue
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            checked += 1
    assert checked >= 7


def test_the_deployment_runs_two_non_root_replicas_behind_its_probes():
    (dep,) = _docs(KUBE / "deployment.yaml")
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] != 0
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    refs = {e.get("secretRef", e.get("configMapRef"))["name"] for e in c["envFrom"]}
    (secret,) = _docs(KUBE / "secret.yaml")
    (config,) = _docs(KUBE / "configmap.yaml")
    assert refs == {secret["metadata"]["name"], config["metadata"]["name"]}
    assert "DATABASE_URL" in secret["stringData"]


def test_the_compose_file_runs_the_image_beside_postgresql():
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    svc = compose["services"]
    app, db = svc["retrieval"], svc["db"]
    assert app["build"]["dockerfile"] == "deploy/Containerfile"
    assert app["build"]["args"]["BASE"] == "${BASE_IMAGE:-python:3.11-slim-bookworm}"
    assert app["ports"] == ["${RETRIEVAL_PORT:-8080}:8080"]
    assert "@db:5432/" in app["environment"]["DATABASE_URL"]
    assert db["image"] == "${PG_IMAGE:-pgvector/pgvector:pg17}"
    assert db["volumes"] == ["pgdata:/var/lib/postgresql/data"] and "pgdata" in compose["volumes"]
    observed = {name for name, s in svc.items() if "observability" in s.get("profiles", [])}
    assert observed == {"prometheus", "grafana"}
    containerfile = (ROOT / "deploy" / "Containerfile").read_text()
    assert "ARG BASE=python:3.11-slim-bookworm" in containerfile
    assert 'CMD ["retrieval", "serve", "--host", "0.0.0.0", "--port", "8080"]' in containerfile
    assert (
        "USER 10001" in containerfile
        and "embedded" not in containerfile.split("pip install")[1].split("\n")[0]
    )
