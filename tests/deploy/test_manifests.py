"""The compose file, the Dockerfile, the Kubernetes manifests and the Collector configs agree with each other and
with the agent's settings. Docker and kubectl are not available here, so this checks what can be checked by reading:
YAML parses, names and ports line up, every RAGMON_* variable is a real settings field and its value validates."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from ragmon.memory import parse_size
from ragmon.settings import NESTED_DELIMITER, Settings, load_settings
from tests.deploy.conftest import DEPLOY, REPO, dockerfile_env, k8s_find

AGENT_IMAGE = "ragmon/agent:dev"
COLLECTOR_IMAGE = re.compile(r"^otel/opentelemetry-collector-contrib:\d+\.\d+\.\d+$")
DATA_DIR = "/var/lib/ragmon"
AGENT_PORTS = {4317, 4318, 4320}


# --- helpers ---------------------------------------------------------------------------------------------------
def settings_paths(model: type[BaseModel] = Settings, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every leaf field of the settings tree, as a path (nested models are walked, as `__` nests them)."""
    out: set[tuple[str, ...]] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out |= settings_paths(annotation, (*prefix, name))
        else:
            out.add((*prefix, name))
    return out


SETTINGS_ENV = {"RAGMON_" + NESTED_DELIMITER.join(p).upper() for p in settings_paths()} | {"RAGMON_CONFIG"}


def assert_settings_env(env: dict[str, str], where: str) -> None:
    names = {k for k in env if k.startswith("RAGMON_")}
    unknown = names - SETTINGS_ENV
    assert not unknown, f"{where}: {sorted(unknown)} are not fields of ragmon.settings.Settings"
    load_settings(env=env)  # values validate (raises naming the field)


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def agent_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if svc.get("image") == AGENT_IMAGE and "serve" in (svc.get("command") or ["serve"])
    }


def container_ports(mapping: str | int) -> int:
    return int(str(mapping).split(":")[-1].split("/")[0])


def secret_values(k8s_docs: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    out = {}
    for secret in k8s_find(k8s_docs, "Secret"):
        for key, value in (secret.get("stringData") or {}).items():
            out[(secret["metadata"]["name"], key)] = value
    return out


def image_is_agent(container: dict[str, Any]) -> bool:
    return bool(container["image"] == AGENT_IMAGE)


# Downward-API fields the manifests read, with an example of the value a pod gets.
POD_FIELDS = {"metadata.labels['apps.kubernetes.io/pod-index']": "2"}


def container_env(container: dict[str, Any], secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "resourceFieldRef" in item["valueFrom"]:
            # the downward API gives a resource as a plain number (bytes for memory, with the default divisor 1)
            ref = item["valueFrom"]["resourceFieldRef"]
            assert ref.get("containerName", container["name"]) == container["name"], item["name"]
            group, resource = ref["resource"].split(".", 1)
            env[item["name"]] = str(parse_size(container["resources"][group][resource]))
        elif "fieldRef" in item["valueFrom"]:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in POD_FIELDS, f"{item['name']}: {path} is not a pod field used here"
            env[item["name"]] = POD_FIELDS[path]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) in secrets, f"{item['name']}: no Secret {ref['name']}/{ref['key']}"
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
    return env


def pod_specs(k8s_docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"])
        for d in k8s_docs
        if d["kind"] in {"StatefulSet", "Deployment", "Job", "DaemonSet"}
    ]


# --- Dockerfile ------------------------------------------------------------------------------------------------
def test_dockerfile_runs_the_agent_as_non_root_with_health_check_and_volume(dockerfile: list[tuple[str, str]]) -> None:
    by = {}
    for instruction, rest in dockerfile:
        by.setdefault(instruction, []).append(rest)
    assert by["FROM"] == ["python:3.11-slim"]
    assert any('".[agent]"' in run or "'.[agent]'" in run for run in by["RUN"]), "pip install .[agent]"
    user = by["USER"][-1].split(":")[0]
    assert user not in {"root", "0"}, "the image must not run as root"
    assert any("useradd" in run and user in run for run in by["RUN"]), "the USER is created in the image"
    assert yaml.safe_load(by["VOLUME"][0]) == [DATA_DIR]
    assert {int(p) for p in by["EXPOSE"][0].split()} == AGENT_PORTS
    env = dockerfile_env(dockerfile)
    assert env["RAGMON_AGENT__DATA_DIR"] == DATA_DIR
    for name, port in (("OTLP_GRPC", 4317), ("OTLP_HTTP", 4318), ("API", 4320)):
        assert host_port(env[f"RAGMON_AGENT__{name}"]) == ("0.0.0.0", port)
    assert_settings_env(env, "Dockerfile ENV")
    (health,) = by["HEALTHCHECK"]
    _, api_port = host_port(env["RAGMON_AGENT__API"])
    assert f"http://127.0.0.1:{api_port}/health" in health
    assert yaml.safe_load(by["ENTRYPOINT"][0]) == ["ragmon"]
    # Everything copied into the image exists in the build context (the repository root).
    for copy in by["COPY"]:
        *sources, _ = shlex.split(copy)
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"


# --- compose -------------------------------------------------------------------------------------------------
def test_compose_services_images_ports_and_volumes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    agents = agent_services(compose)
    assert len(agents) >= 2
    for name, svc in agents.items():
        build = svc["build"]
        assert (DEPLOY / "docker" / build["context"] / build["dockerfile"]).resolve() == (
            DEPLOY / "docker" / "Dockerfile"
        ).resolve(), name
        mounts = [v.split(":") for v in svc["volumes"]]
        assert [m[1] for m in mounts] == [DATA_DIR], f"{name}: the data dir is its own volume"
        assert mounts[0][0] in compose["volumes"], f"{name}: named volume declared"
        env = compose_env(svc)
        assert env["RAGMON_AGENT__DATA_DIR"] == DATA_DIR
        assert env["RAGMON_AGENT__CLICKHOUSE_URL"].split("@")[-1].startswith("clickhouse:8123")
        for mapping in [*svc.get("ports", []), *svc.get("expose", [])]:
            assert container_ports(mapping) in AGENT_PORTS, f"{name}: {mapping} is not a port the agent listens on"
        assert_settings_env(env, f"compose service {name}")
    # Each agent has its own data volume (one data directory has one owner) and, sharing one ClickHouse
    # database, its own instance number.
    volumes = [svc["volumes"][0].split(":")[0] for svc in agents.values()]
    assert len(set(volumes)) == len(volumes)
    instances = [compose_env(svc).get("RAGMON_AGENT__INSTANCE") for svc in agents.values()]
    assert None not in instances and len(set(instances)) == len(instances), instances
    # Every service's image: the agent image or a pinned third-party one.
    for name, svc in services.items():
        image = svc["image"]
        assert image == AGENT_IMAGE or re.search(r":\d[\w.]*$", image), f"{name}: image {image} is not pinned"
    assert COLLECTOR_IMAGE.match(services["collector"]["image"])
    assert services["clickhouse"]["image"].startswith("clickhouse/clickhouse-server:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    # Every bind mount's source exists.
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / "docker" / source).exists(), f"{name}: {source} missing"
    for name, svc in services.items():
        for dep in svc.get("depends_on", []):
            assert dep in services, f"{name} depends on unknown {dep}"


def test_compose_demo_and_collector_wiring(compose: dict[str, Any], collector_config: dict[str, Any]) -> None:
    services = compose["services"]
    demo = services["demo"]["command"]
    assert demo[0] == "demo"
    endpoint = demo[demo.index("--endpoint") + 1]
    assert endpoint == "http://collector:4318"
    assert host_port(collector_config["receivers"]["otlp"]["protocols"]["http"]["endpoint"])[1] == 4318
    # The collector mounts the config this test reads.
    (mount,) = services["collector"]["volumes"]
    source, target, *_ = mount.split(":")
    assert (DEPLOY / "docker" / source).resolve() == (DEPLOY / "otel-collector" / "config.yaml").resolve()
    assert services["collector"]["command"] == [f"--config={target}"]
    # The load-balancing targets are exactly the agent services, on the agent's gRPC port.
    hostnames = collector_config["exporters"]["loadbalancing"]["resolver"]["static"]["hostnames"]
    agents = agent_services(compose)
    assert sorted(h.split(":")[0] for h in hostnames) == sorted(agents)
    for hostname in hostnames:
        agent_env = compose_env(agents[hostname.split(":")[0]])
        assert host_port(hostname)[1] == host_port(agent_env["RAGMON_AGENT__OTLP_GRPC"])[1]
    # The migrate one-shot uses the same ClickHouse as the agents.
    migrate = services["migrate"]["command"]
    url = migrate[migrate.index("--clickhouse-url") + 1]
    assert {compose_env(a)["RAGMON_AGENT__CLICKHOUSE_URL"] for a in agents.values()} == {url}


def test_grafana_provisioning_parses() -> None:
    import json

    grafana = DEPLOY / "grafana"
    (datasources,) = yaml.safe_load((grafana / "provisioning" / "datasources" / "clickhouse.yaml").read_text())[
        "datasources"
    ]
    dashboard = json.loads((grafana / "dashboards" / "ragmon.json").read_text())
    tables_read = set()
    for panel in dashboard["panels"]:
        if panel.get("type") == "row":
            continue
        assert panel["datasource"]["uid"] == datasources["uid"], panel.get("title")
        for target in panel["targets"]:
            read = set(re.findall(r"\bragmon\.(\w+)", target["rawSql"]))
            assert read, f"{panel.get('title')}: reads no ragmon table"
            tables_read |= read
    # Latency and cost from the per-minute rollup, quality trends from the judges' scores, the alerts table.
    assert {"spans_1m", "scores", "alerts"} <= tables_read, tables_read
    # compose provisions this very folder.
    with open(DEPLOY / "docker" / "compose.yaml") as f:
        mounts = yaml.safe_load(f)["services"]["grafana"]["volumes"]
    sources = {(DEPLOY / "docker" / m.split(":")[0]).resolve() for m in mounts}
    assert {(grafana / "provisioning").resolve(), (grafana / "dashboards").resolve()} <= sources


# --- the Collector's documented schema for the parts used --------------------------------------------------------
# From the contrib loadbalancing exporter's README: routing_key options; one resolver of these kinds; the protocol
# is OTLP only (any otlp exporter option).
ROUTING_KEYS = {"service", "traceID", "resource", "metric", "streamID", "attributes"}
RESOLVERS = {
    "static": {"hostnames"},
    "dns": {"hostname", "port", "interval", "timeout", "quarantine"},
    "k8s": {"service", "ports", "timeout", "return_hostnames"},
    "aws_cloud_map": {"namespace", "service_name", "port", "health_status", "interval", "timeout"},
}
LB_KEYS = {"routing_key", "routing_attributes", "protocol", "resolver", "timeout", "sending_queue", "retry_on_failure"}
OTLP_KEYS = {
    "endpoint",
    "tls",
    "headers",
    "timeout",
    "compression",
    "sending_queue",
    "retry_on_failure",
    "balancer_name",
    "keepalive",
    "write_buffer_size",
    "read_buffer_size",
    "wait_for_ready",
    "auth",
}
PIPELINE_KINDS = ("receivers", "processors", "exporters")


def check_collector_config(config: dict[str, Any]) -> dict[str, Any]:
    assert set(config) <= {"receivers", "processors", "exporters", "extensions", "connectors", "service"}
    lb = config["exporters"].get("loadbalancing") or config["exporters"]["load_balancing"]
    assert set(lb) <= LB_KEYS, set(lb) - LB_KEYS
    assert lb["routing_key"] == "traceID" and lb["routing_key"] in ROUTING_KEYS
    assert list(lb["protocol"]) == ["otlp"], "the loadbalancing exporter speaks OTLP only"
    assert set(lb["protocol"]["otlp"]) <= OTLP_KEYS, set(lb["protocol"]["otlp"]) - OTLP_KEYS
    assert "endpoint" not in lb["protocol"]["otlp"], "endpoints come from the resolver"
    (kind,) = lb["resolver"]  # exactly one resolver
    assert set(lb["resolver"][kind]) <= RESOLVERS[kind]
    if kind == "static":
        assert lb["resolver"]["static"]["hostnames"]
    # Every component the service uses is defined, and the traces pipeline ends at the load balancer.
    service = config["service"]
    for extension in service.get("extensions", []):
        assert extension in config["extensions"]
    traces = service["pipelines"]["traces"]
    for kind_name in PIPELINE_KINDS:
        for component in traces.get(kind_name, []):
            assert component in config[kind_name], f"{kind_name}: {component} undefined"
    assert traces["exporters"] == ["loadbalancing"]
    return lb


def test_docker_collector_config_follows_the_loadbalancing_schema(collector_config: dict[str, Any]) -> None:
    lb = check_collector_config(collector_config)
    assert list(lb["resolver"]) == ["static"]


# --- Kubernetes ----------------------------------------------------------------------------------------------
def test_k8s_manifests_parse_and_are_consistent(k8s_docs: list[dict[str, Any]]) -> None:
    namespaces = {d["metadata"]["name"] for d in k8s_find(k8s_docs, "Namespace")}
    for doc in k8s_docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] in namespaces, doc["metadata"]["name"]
    (sts,) = k8s_find(k8s_docs, "StatefulSet", "ragmon-agent")
    (headless,) = k8s_find(k8s_docs, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert headless["spec"]["selector"].items() <= labels.items()
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["image"] == AGENT_IMAGE
    named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert set(named_ports.values()) == AGENT_PORTS
    for port in headless["spec"]["ports"]:
        assert named_ports[port["targetPort"]] == port["port"]
    # The write-ahead log's directory is on the claim template's volume.
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == DATA_DIR
    assert claim["spec"]["resources"]["requests"]["storage"]
    env = container_env(container, secret_values(k8s_docs))
    assert env["RAGMON_AGENT__DATA_DIR"] == DATA_DIR
    for name in ("OTLP_GRPC", "OTLP_HTTP", "API"):
        assert host_port(env[f"RAGMON_AGENT__{name}"])[1] in named_ports.values()
    # Keys come from the Secret, never inline.
    by_name = {item["name"]: item for item in container["env"]}
    for secret_env in ("RAGMON_AGENT__API_KEYS", "RAGMON_JUDGE__API_KEY", "RAGMON_AGENT__CLICKHOUSE_URL"):
        assert "secretKeyRef" in by_name[secret_env]["valueFrom"], secret_env
    probe_port = container["readinessProbe"]["httpGet"]["port"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert named_ports[probe_port] == host_port(env["RAGMON_AGENT__API"])[1]


def test_k8s_every_container_has_requests_and_valid_ragmon_env(k8s_docs: list[dict[str, Any]]) -> None:
    secrets = secret_values(k8s_docs)
    for where, spec in pod_specs(k8s_docs):
        for container in spec["containers"]:
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= set(requests), where
            env = container_env(container, secrets)
            assert_settings_env(env, where)
            if where.startswith("StatefulSet/") and image_is_agent(container):
                # Replicas share one ClickHouse database: each takes its own instance number from its ordinal.
                assert (
                    env.get("RAGMON_AGENT__INSTANCE") == POD_FIELDS["metadata.labels['apps.kubernetes.io/pod-index']"]
                )
            image = container["image"]
            assert image == AGENT_IMAGE or COLLECTOR_IMAGE.match(image), f"{where}: {image}"


def test_k8s_agent_memory_limit_is_the_pods_limit(k8s_docs: list[dict[str, Any]]) -> None:
    (sts,) = k8s_find(k8s_docs, "StatefulSet", "ragmon-agent")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = container_env(container, secret_values(k8s_docs))
    settings = load_settings(env=env)
    assert settings.agent.memory_limit == parse_size(container["resources"]["limits"]["memory"])


def test_k8s_collector_routes_by_trace_id_to_the_headless_service(k8s_docs: list[dict[str, Any]]) -> None:
    (config_map,) = k8s_find(k8s_docs, "ConfigMap", "ragmon-collector")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    lb = check_collector_config(config)
    (sts,) = k8s_find(k8s_docs, "StatefulSet", "ragmon-agent")
    namespace = sts["metadata"]["namespace"]
    service = sts["spec"]["serviceName"]
    resolver = lb["resolver"]
    if "dns" in resolver:
        assert resolver["dns"]["hostname"] == f"{service}.{namespace}.svc.cluster.local"
        port = resolver["dns"]["port"]
    else:
        assert resolver["k8s"]["service"] == f"{service}.{namespace}"
        (port,) = resolver["k8s"]["ports"]
    (headless,) = k8s_find(k8s_docs, "Service", service)
    grpc_ports = [p["port"] for p in headless["spec"]["ports"] if p["name"] == "otlp-grpc"]
    assert grpc_ports == [port]
    # The collector pod mounts that ConfigMap where its --config points, and the bearer key is from the Secret.
    (deployment,) = k8s_find(k8s_docs, "Deployment", "ragmon-collector")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (volume,) = spec["volumes"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    (mount,) = container["volumeMounts"]
    assert container["args"] == [f"--config={mount['mountPath']}/config.yaml"]
    header = lb["protocol"]["otlp"]["headers"]["authorization"]
    variable = re.fullmatch(r"Bearer \$\{env:(\w+)\}", header)
    assert variable is not None
    (item,) = [e for e in container["env"] if e["name"] == variable.group(1)]
    key = item["valueFrom"]["secretKeyRef"]
    secrets = secret_values(k8s_docs)
    # The key the collector presents is one the agents accept.
    api_keys = yaml.safe_load(secrets[("ragmon-secrets", "api-keys")])
    assert secrets[(key["name"], key["key"])] in api_keys.values()


def test_k8s_migrate_job_targets_a_named_cluster(k8s_docs: list[dict[str, Any]]) -> None:
    (job,) = k8s_find(k8s_docs, "Job", "ragmon-migrate")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "migrate" and args[args.index("--cluster") + 1]
    assert args[args.index("--clickhouse-url") + 1] == "$(RAGMON_AGENT__CLICKHOUSE_URL)"


@pytest.mark.parametrize("name", ["RAGMON_AGENT__NOPE", "RAGMON_AGENTS__API"])
def test_the_env_check_catches_unknown_names(name: str) -> None:
    with pytest.raises(AssertionError):
        assert_settings_env({name: "x"}, "probe")
