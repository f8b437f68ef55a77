"""Configuration loading: defaults, environment overrides, and errors that point at the line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bridge import settings
from bridge.config import check_config, config_to_yaml, load_config, parse_config
from bridge.domain.pod_rendering import PodSettings
from bridge.errors import ConfigError
from bridge.settings import BridgeConfig, BridgeSettings, KubernetesSettings, SlurmSettings
from tests.unit.fakes import MINIMAL_CONFIG as MINIMAL

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "bridge.yaml"


def test_minimal_file_gets_the_defaults() -> None:
    config = parse_config(MINIMAL, "bridge.yaml")
    # cluster_name has no default in the file (up to 0.1.0 it was 'slurm'): the file's is used.
    assert config.cluster_name == "lab"
    assert config.kubernetes == KubernetesSettings()
    assert config.slurm == SlurmSettings(conf_server="10.213.0.1:6817")
    assert config.bridge == BridgeSettings()
    assert config.bridge.socket_mode == 0o660
    assert config.bridge.reconcile_interval_s == 5.0
    assert config.slurm.command_timeout_s == 10.0
    assert config.pools.all_nodes() == ("cpu-0", "cpu-1", "cpu-2", "cpu-3")
    (pool,) = config.pools
    assert (pool.partition, pool.features, pool.gres, pool.weight) == ("cpu", (), (), None)
    assert config.pod_settings() == PodSettings(
        namespace="slurm", cluster_name="lab", conf_server="10.213.0.1:6817"
    )
    assert config.source == "bridge.yaml"


def test_example_file_loads() -> None:
    config = load_config(EXAMPLE, environ={})
    assert [p.name for p in config.pools] == ["cpu", "big"]
    cpu, big = config.pools
    assert (cpu.nodes, cpu.cpus, cpu.real_memory_mb, cpu.partition) == (
        "cpu-[0-15]",
        2,
        1024,
        "cpu",
    )
    assert (big.nodes, big.cpus, big.real_memory_mb, big.partition) == ("big-[0-3]", 4, 4096, "big")
    assert len(config.pools.all_nodes()) == 20
    assert config.kubernetes.kubeconfig == "/etc/slurm-k8s-bridge/kubeconfig"
    assert config.bridge.socket_group == "slurm"
    assert cpu.pod_template["metadata"]["labels"] == {"team": "hpc"}


def test_check_config_summarises(tmp_path: Path) -> None:
    summary = check_config(EXAMPLE, environ={})
    assert summary.splitlines() == [
        f"{EXAMPLE}: OK",
        "cluster slurm, namespace slurm, conf server 10.213.0.1:6817",
        "pool cpu: cpu-[0-15] (16 nodes), partition cpu, 2 CPUs, 1024 MB, "
        "image localhost/slurmd:dev",
        "pool big: big-[0-3] (4 nodes), partition big, 4 CPUs, 4096 MB, image localhost/slurmd:dev",
    ]


def test_round_trip_through_yaml() -> None:
    config = load_config(EXAMPLE, environ={})
    again = parse_config(config_to_yaml(config), "again.yaml")
    assert again == config
    assert "socket_mode: '0660'" in config_to_yaml(config)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"SKB_CLUSTER_NAME": "prod"}, ("cluster_name", "prod")),
        ({"SKB_KUBERNETES_NAMESPACE": "hpc"}, ("kubernetes.namespace", "hpc")),
        ({"SKB_KUBERNETES_KUBECONFIG": "/k"}, ("kubernetes.kubeconfig", "/k")),
        ({"SKB_KUBERNETES_KUBECONFIG": ""}, ("kubernetes.kubeconfig", None)),
        ({"SKB_SLURM_CONF_SERVER": "ctl:7817"}, ("slurm.conf_server", "ctl:7817")),
        ({"SKB_SLURM_CONF": "/etc/slurm/x.conf"}, ("slurm.conf", "/etc/slurm/x.conf")),
        ({"SKB_SLURM_COMMAND_TIMEOUT_S": "2.5"}, ("slurm.command_timeout_s", 2.5)),
        ({"SKB_SLURM_AUTH": "slurm"}, ("slurm.auth", "slurm")),
        ({"SKB_SLURM_SLURM_KEY_SECRET": "k"}, ("slurm.slurm_key_secret", "k")),
        ({}, ("slurm.auth", "munge")),
        ({}, ("slurm.slurm_key_secret", "slurm-key")),
        ({"SKB_BRIDGE_SOCKET_MODE": "0600"}, ("bridge.socket_mode", 0o600)),
        ({"SKB_BRIDGE_SOCKET_MODE": "0o640"}, ("bridge.socket_mode", 0o640)),
        ({"SKB_BRIDGE_CREATE_CONCURRENCY": "4"}, ("bridge.create_concurrency", 4)),
        ({"SKB_BRIDGE_LOG_FORMAT": "json"}, ("bridge.log_format", "json")),
        ({"SKB_BRIDGE_TCP_LISTEN": "127.0.0.1:0"}, ("bridge.tcp_listen", "127.0.0.1:0")),
        ({"SKB_SOMETHING_ELSE": "x", "PATH": "/bin"}, ("cluster_name", "lab")),
    ],
)
def test_environment_overrides(environ: dict[str, str], expected: tuple[str, object]) -> None:
    config = parse_config(MINIMAL, "bridge.yaml", environ)
    value: object = config
    for part in expected[0].split("."):
        value = getattr(value, part)
    assert value == expected[1]


def test_environment_overrides_the_file_value() -> None:
    text = MINIMAL + "kubernetes:\n  namespace: fromfile\n"
    assert parse_config(text, environ={"SKB_KUBERNETES_NAMESPACE": "env"}).kubernetes.namespace == (
        "env"
    )


POOL = """\
  - name: cpu
    nodes: cpu-[0-3]
    cpus: 2
    real_memory_mb: 1024
    image: img
"""
HEAD = "slurm:\n  conf_server: ctl:6817\npools:\n"  # lines 1-3; POOL starts on line 4
#: A bridge section with a TCP listener and mutual TLS (lines 10-14 after HEAD and POOL).
MUTUAL_TLS = (
    "bridge:\n  tcp_listen: 0.0.0.0:7000\n  tls_cert: /c\n  tls_key: /k\n  tls_client_ca: /ca\n"
)

CLUSTER_NAME_REQUIRED = (
    "cluster_name: required: the name this bridge's pods are labelled with, one per bridge in "
    "a namespace (Slurm's ClusterName is a good one). Up to 0.1.0 it defaulted to 'slurm': a "
    "bridge whose pods run set `cluster_name: slurm` to keep them"
)


def named(text: str) -> str:
    """``text`` with the required cluster_name as its last line: the lines above keep their
    numbers, and a row that tests one mistake has no other."""
    return text + "cluster_name: lab\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            named(
                HEAD + POOL + "  - name: big\n    nodes: big-0\n    cpus: four\n"
                "    real_memory_mb: 1\n    image: i\n"
            ),
            "bridge.yaml:11: pools[1].cpus: must be a positive integer up to 2147483647, "
            "got 'four'",
        ),
        (
            named(HEAD + POOL.replace("cpus: 2", "cpu: 2")),
            "bridge.yaml:6: pools[0].cpu: unknown key; known keys: name, nodes, cpus, "
            "real_memory_mb, partition, image, features, gres, weight, schedule_timeout_s, "
            "image_pull_timeout_s, pod_template, circuit_breaker, disruption_budget, sockets, "
            "cores_per_socket, threads_per_core, tmp_disk_mb, partition_options, gres_resources",
        ),
        (
            named(HEAD + POOL.replace("    cpus: 2\n", "")),
            "bridge.yaml:4: pools[0]: cpus: required",
        ),
        (
            named(HEAD + POOL.replace("cpu-[0-3]", "CPU-[0-3]")),
            "bridge.yaml:5: pools[0].nodes: node 'CPU-0' cannot be a pod name: 'CPU-0' is not a "
            "DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter "
            "or digit)",
        ),
        (
            named(HEAD + POOL + POOL.replace("name: cpu", "name: two").replace("[0-3]", "[3-4]")),
            "bridge.yaml:10: pools[1].nodes: node 'cpu-3' is also in pool 'cpu'; a node belongs "
            "to one pool",
        ),
        (
            named(HEAD + POOL + POOL.replace("[0-3]", "[4-5]")),
            "bridge.yaml:9: pools[1].name: pools[0] already uses this name",
        ),
        (
            named(HEAD + POOL + "    features: [a, 'b c']\n"),
            "bridge.yaml:9: pools[0].features[1]: 'b c' is not a single Slurm word (no blanks, "
            "',' or '=')",
        ),
        (
            named(HEAD + POOL + "    features: [a, 3]\n"),
            "bridge.yaml:9: pools[0].features[1]: must be a string, got 3",
        ),
        (
            named(HEAD + POOL.replace("    image: img\n", "")),
            "bridge.yaml:4: pools[0].image: required (or set the image of the 'slurmd' container "
            "in pod_template)",
        ),
        (
            named(
                HEAD + POOL + "    pod_template:\n      spec:\n        containers:\n"
                "          - name: slurmd\n            env:\n              - name: SLURM_NODENAME\n"
            ),
            "bridge.yaml:14: pools[0].pod_template.spec.containers[0].env[0].name: SLURM_NODENAME "
            "is set by the bridge",
        ),
        (
            named(
                HEAD
                + POOL
                + "    pod_template:\n      metadata:\n        labels:\n          gpu: yes\n"
            ),
            "bridge.yaml:12: pools[0].pod_template.metadata.labels.gpu: must be a string, got True "
            "(quote it)",
        ),
        (
            named(HEAD + POOL + "    pod_template:\n      spec:\n        restartPolicy: Always\n"),
            "bridge.yaml:11: pools[0].pod_template.spec.restartPolicy: must be Never: a crashed "
            "slurmd has to surface as a failure, not restart",
        ),
        (
            named(HEAD + POOL + "    weight: heavy\n"),
            "bridge.yaml:9: pools[0].weight: must be an integer, got 'heavy'",
        ),
        (named(HEAD), "bridge.yaml:3: pools: at least one pool is required"),
        (
            named(HEAD + "  name: x\n"),
            "bridge.yaml:3: pools: must be a list of pools, got {'name': 'x'}",
        ),
        (
            named("pools:\n" + POOL),
            "bridge.yaml: slurm.conf_server: required: the host:port slurmd fetches its "
            "configuration from (e.g. 10.213.0.1:6817)",
        ),
        (
            named("slurm:\n  conf_server: 'a b'\npools:\n" + POOL),
            "bridge.yaml:2: slurm.conf_server: must be host[:port], got 'a b' "
            "(e.g. 10.213.0.1:6817)",
        ),
        (
            named("slurm:\n  conf_server: ctl:6817\n  auth: kerberos\npools:\n" + POOL),
            "bridge.yaml:3: slurm.auth: must be munge or slurm (auth/slurm, Slurm 23.11+), "
            "got 'kerberos'",
        ),
        (
            named("slurm:\n  conf_server: ctl:6817\n  slurm_key_secret: Key\npools:\n" + POOL),
            "bridge.yaml:3: slurm.slurm_key_secret: 'Key' is not a valid Kubernetes object name "
            "(DNS-1123 subdomain)",
        ),
        (
            named(
                "slurm:\n  conf_server: ctl:6817\n  auth: slurm\npools:\n"
                + POOL
                + "    pod_template:\n      spec:\n        volumes:\n          - name: slurm-key\n"
            ),
            "bridge.yaml:13: pools[0].pod_template.spec.volumes[0].name: 'slurm-key' is set by "
            "the bridge with slurm.auth: slurm",
        ),
        (
            named(
                "slurm:\n  conf_server: ctl:6817\n  auth: slurm\npools:\n"
                + POOL
                + "    pod_template:\n      spec:\n        containers:\n"
                "          - name: slurmd\n            env:\n              - name: SLURM_KEY_FILE\n"
            ),
            "bridge.yaml:15: pools[0].pod_template.spec.containers[0].env[0].name: SLURM_KEY_FILE "
            "is set by the bridge with slurm.auth: slurm",
        ),
        (
            named(
                HEAD + POOL + "    pod_template:\n      spec:\n        containers:\n"
                "          - name: slurmd\n            env:\n              - name: MUNGE_KEY_FILE\n"
            ),
            "bridge.yaml:14: pools[0].pod_template.spec.containers[0].env[0].name: MUNGE_KEY_FILE "
            "is set by the bridge with slurm.auth: munge",
        ),
        # Issue 31 item 3: the key goes to slurmd alone, through the bridge's mount only.
        (
            named(
                HEAD
                + POOL
                + "    pod_template:\n      spec:\n        volumes:\n          - name: k\n"
                "            secret: {secretName: slurm-munge-key, defaultMode: 0440}\n"
            ),
            "bridge.yaml:13: pools[0].pod_template.spec.volumes[0].secret.secretName: mounts the "
            "key Secret slurm-munge-key; only the bridge mounts it, into slurmd alone",
        ),
        (
            named(
                "slurm:\n  conf_server: ctl:6817\n  slurm_key_secret: cluster-key\npools:\n"
                + POOL
                + "    pod_template:\n      spec:\n        volumes:\n          - name: all\n"
                "            projected:\n              sources:\n"
                "                - secret: {name: cluster-key}\n"
            ),
            "bridge.yaml:16: pools[0].pod_template.spec.volumes[0].projected.sources[0].secret."
            "name: mounts the key Secret cluster-key; only the bridge mounts it, into slurmd alone",
        ),
        (
            named(
                HEAD
                + POOL
                + "    pod_template:\n      spec:\n        containers:\n          - name: log\n"
                "            image: busybox\n            volumeMounts:\n"
                "              - {name: munge-key, mountPath: /k}\n"
            ),
            "bridge.yaml:15: pools[0].pod_template.spec.containers[0].volumeMounts[0].name: "
            "'munge-key' is the key's volume: only the slurmd container mounts it",
        ),
        (
            named(
                HEAD + POOL + "    pod_template:\n      spec:\n        initContainers:\n"
                "          - name: prep\n            image: busybox\n            envFrom:\n"
                "              - secretRef: {name: slurm-key}\n"
            ),
            "bridge.yaml:15: pools[0].pod_template.spec.initContainers[0].envFrom[0].secretRef."
            "name: reads the key Secret slurm-key; only the bridge mounts it, into slurmd alone",
        ),
        (
            named(
                HEAD + POOL + "    pod_template:\n      spec:\n        containers:\n"
                "          - name: slurmd\n            env:\n              - name: K\n"
                "                valueFrom:\n                  secretKeyRef:\n"
                "                    {name: slurm-munge-key, key: munge.key}\n"
            ),
            "bridge.yaml:17: pools[0].pod_template.spec.containers[0].env[0].valueFrom."
            "secretKeyRef.name: reads the key Secret slurm-munge-key; only the bridge mounts it, "
            "into slurmd alone",
        ),
        (
            named(HEAD + POOL + "kubernetes:\n  namespase: x\n"),
            "bridge.yaml:10: kubernetes.namespase: unknown key; known keys: namespace, "
            "kubeconfig, context, node_service, cluster_domain, leader_election, lease_name, "
            "leader_identity, lease_duration_s, lease_retry_s, gang_scheduling",
        ),
        (
            named(HEAD + POOL + "kubernetes:\n  namespace: Slurm\n"),
            "bridge.yaml:10: kubernetes.namespace: 'Slurm' is not a DNS-1123 label (lower-case "
            "letters, digits and '-', starting and ending with a letter or digit)",
        ),
        (
            named(HEAD + POOL + "bridge:\n  socket_mode: 660\n"),
            "bridge.yaml:10: bridge.socket_mode: must be an octal mode like 0660, got 660",
        ),
        (
            named(HEAD + POOL + "bridge:\n  reconcile_interval_s: 0\n"),
            "bridge.yaml:10: bridge.reconcile_interval_s: must be a positive number up to "
            "3.1536e+07 (seconds), got 0",
        ),
        (
            named(HEAD + POOL + "bridge:\n  pod_age_guard_s: -1\n"),
            "bridge.yaml:10: bridge.pod_age_guard_s: must be a number from 0 to 3.1536e+07 "
            "(seconds), got -1",
        ),
        (
            named(HEAD + POOL + "bridge:\n  log_format: xml\n"),
            "bridge.yaml:10: bridge.log_format: must be text or json, got 'xml'",
        ),
        (
            named(HEAD + POOL + "bridge:\n  socket: relative.sock\n"),
            "bridge.yaml:10: bridge.socket: must be an absolute path, got 'relative.sock'",
        ),
        (
            named(HEAD + POOL + "bridge:\n  create_concurrency: null\n"),
            "bridge.yaml:10: bridge.create_concurrency: must be set (null is not allowed here)",
        ),
        (
            named(HEAD + POOL + "bridge:\n  tcp_listen: 0.0.0.0:7000\n  tls_cert: /c\n"),
            "bridge.yaml:11: bridge.tls_cert: mutual TLS needs tls_cert, tls_key and "
            "tls_client_ca together; missing tls_key, tls_client_ca",
        ),
        (
            named(HEAD + POOL + "bridge:\n  tcp_listen: 0.0.0.0:7000\n"),
            "bridge.yaml:10: bridge.tcp_listen: a non-loopback TCP listener needs tls_cert, "
            "tls_key and tls_client_ca (mutual TLS)",
        ),
        (
            named(HEAD + POOL + "bridge:\n  tls_cert: /c\n  tls_key: /k\n  tls_client_ca: /ca\n"),
            "bridge.yaml:10: bridge.tls_cert: TLS applies only to tcp_listen, which is not set",
        ),
        (
            named(HEAD + POOL + MUTUAL_TLS),
            "bridge.yaml:11: bridge.tls_cert: mutual TLS needs the client certificates' names "
            '(their DNS or URI subjectAltNames, e.g. [slurmctld.example.org]); ["*"] accepts any '
            "certificate tls_client_ca signed",
        ),
        (
            named(HEAD + POOL + MUTUAL_TLS + "  tls_client_names: []\n"),
            "bridge.yaml:14: bridge.tls_client_names: mutual TLS needs the client certificates' "
            'names (their DNS or URI subjectAltNames, e.g. [slurmctld.example.org]); ["*"] '
            "accepts any certificate tls_client_ca signed",
        ),
        (
            named(HEAD + POOL + "bridge:\n  tcp_listen: 7000\n"),
            "bridge.yaml:10: bridge.tcp_listen: must be a string, got 7000",
        ),
        (
            named(HEAD + POOL + "bridge:\n  advertise_address: bridge-a.example\n"),
            "bridge.yaml:10: bridge.advertise_address: must be host:port, got 'bridge-a.example'",
        ),
        (
            named(HEAD + POOL + "bridge:\n  advertise_address: bridge-a.example:7000\n"),
            "bridge.yaml:10: bridge.advertise_address: other bridges forward to this address "
            "over mutual TLS: set tcp_listen, tls_cert, tls_key and tls_client_ca",
        ),
        (
            HEAD + POOL + "cluster_name: Prod_1\n",
            "bridge.yaml:9: cluster_name: 'Prod_1' is not a DNS-1123 label (lower-case letters, "
            "digits and '-', starting and ending with a letter or digit)",
        ),
        (
            named(HEAD + POOL + "extra: 1\n"),
            "bridge.yaml:9: extra: unknown key; known keys: "
            "cluster_name, kubernetes, slurm, bridge, pools",
        ),
        (
            named(HEAD + POOL + "slurm:\n  bin_dir: /usr/bin\n"),
            "bridge.yaml:9: slurm: duplicate key (first on line 1)",
        ),
        (named(HEAD + POOL + "1: x\n"), "bridge.yaml:9: top level: keys must be strings"),
        (
            "slurm: [\n",
            "bridge.yaml:2: invalid YAML: expected the node content, but found '<stream end>'",
        ),
        ("- 1\n", "bridge.yaml: the file must hold a mapping, got list"),
        # The empty file: cluster_name is the first thing it lacks (it is checked before the
        # sections; up to 0.1.0 this said slurm.conf_server: required).
        ("", f"bridge.yaml: {CLUSTER_NAME_REQUIRED}"),
        (
            named(""),
            "bridge.yaml: slurm.conf_server: required: the host:port slurmd fetches its "
            "configuration from (e.g. 10.213.0.1:6817)",
        ),
        # A file complete but for cluster_name: no default any more, no line to point at.
        (HEAD + POOL, f"bridge.yaml: {CLUSTER_NAME_REQUIRED}"),
        (
            "cluster_name:\n" + HEAD + POOL,
            "bridge.yaml:1: cluster_name: must be set (null is not allowed here)",
        ),
        ("cluster_name: ''\n" + HEAD + POOL, "bridge.yaml:1: cluster_name: must not be empty"),
    ],
)
def test_errors_name_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "bridge.yaml")
    assert str(caught.value) == message


#: MINIMAL without its cluster_name line.
UNNAMED = MINIMAL.replace("cluster_name: lab\n", "")


def test_the_environment_can_name_the_cluster_instead_of_the_file() -> None:
    # The reader merges SKB_* into the file's data before checking it: SKB_CLUSTER_NAME counts.
    assert "cluster_name" not in UNNAMED
    config = parse_config(UNNAMED, "bridge.yaml", {"SKB_CLUSTER_NAME": "prod"})
    assert config.cluster_name == "prod"
    assert config.pod_settings().cluster_name == "prod"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, f"bridge.yaml: {CLUSTER_NAME_REQUIRED}"),
        ({"SKB_SOMETHING_ELSE": "x", "PATH": "/bin"}, f"bridge.yaml: {CLUSTER_NAME_REQUIRED}"),
        ({"SKB_CLUSTER_NAME": ""}, "environment SKB_CLUSTER_NAME: cluster_name: must not be empty"),
        (
            {"SKB_CLUSTER_NAME": "Bad_1"},
            "environment SKB_CLUSTER_NAME: cluster_name: 'Bad_1' is not a DNS-1123 label "
            "(lower-case letters, digits and '-', starting and ending with a letter or digit)",
        ),
    ],
)
def test_a_file_without_cluster_name_is_refused_unless_the_environment_names_it(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(UNNAMED, "bridge.yaml", environ)
    assert str(caught.value) == message


def test_load_config_takes_cluster_name_from_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(UNNAMED)
    monkeypatch.setenv("SKB_CLUSTER_NAME", "prod")
    assert load_config(path).cluster_name == "prod"
    monkeypatch.delenv("SKB_CLUSTER_NAME")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: {CLUSTER_NAME_REQUIRED}"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"SKB_BRIDGE_CREATE_CONCURRENCY": "many"},
            "environment SKB_BRIDGE_CREATE_CONCURRENCY: bridge.create_concurrency: must be a "
            "positive integer, got 'many'",
        ),
        (
            {"SKB_BRIDGE_CREATE_CONCURRENCY": "0"},
            "environment SKB_BRIDGE_CREATE_CONCURRENCY: bridge.create_concurrency: must be a "
            "positive integer up to 1024, got 0",
        ),
        (
            {"SKB_KUBERNETES_NAMESPACE": "Bad"},
            "environment SKB_KUBERNETES_NAMESPACE: kubernetes.namespace: 'Bad' is not a "
            "DNS-1123 label (lower-case letters, digits and '-', starting and ending with a "
            "letter or digit)",
        ),
        (
            {"SKB_BRIDGE_SOCKET_MODE": "rw"},
            "environment SKB_BRIDGE_SOCKET_MODE: bridge.socket_mode: must be an octal mode like "
            "0660, got 'rw'",
        ),
        (
            {"SKB_SLURM_TIMEOUT": "3"},
            "environment SKB_SLURM_TIMEOUT: names no configuration field (known: ",
        ),
    ],
)
def test_environment_errors(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(MINIMAL, "bridge.yaml", environ)
    assert str(caught.value).startswith(message)


def test_load_config_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(MINIMAL + "    cpus: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    # MINIMAL's cluster_name is line 1: its pool's cpus are on line 7.
    assert str(caught.value) == f"{path}:10: pools[0].cpus: duplicate key (first on line 7)"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=r"absent\.yaml: cannot read: No such file"):
        load_config(path, environ={})


def test_load_config_reads_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(MINIMAL)
    monkeypatch.setenv("SKB_BRIDGE_LOG_FORMAT", "json")
    config: BridgeConfig = load_config(path)
    assert config.bridge.log_format == "json"


# ---- bounded input: every number finite and in range, YAML that cannot recurse or explode ----

SECONDS = [
    "slurm:\n  command_timeout_s: {}\n",
    "bridge:\n  reconcile_interval_s: {}\n",
    "bridge:\n  pod_age_guard_s: {}\n",
    "bridge:\n  failed_node_hold_s: {}\n",
    "bridge:\n  terminating_margin_s: {}\n",
]
BAD_SECONDS = [".inf", "-.inf", ".nan", ".NaN", "1.0e+300", "31536001", "0x" + "f" * 2000]


def _with_setting(setting: str) -> str:
    # MINIMAL has a slurm section already: put the setting's key under it, or add a section.
    if setting.startswith("slurm:"):
        return MINIMAL.replace("slurm:\n", setting)
    return MINIMAL + setting


@pytest.mark.parametrize("value", BAD_SECONDS)
@pytest.mark.parametrize("setting", SECONDS)
def test_seconds_must_be_finite_and_at_most_a_year(setting: str, value: str) -> None:
    field = setting.split("\n")[1].split(":", maxsplit=1)[0].strip()
    with pytest.raises(
        ConfigError, match=rf"^bridge\.yaml:\d+: \w+\.{field}: must be a "
    ) as caught:
        parse_config(_with_setting(setting.format(value)), "bridge.yaml")
    assert "(seconds), got " in str(caught.value)
    assert len(str(caught.value)) < 200


POOL_SECONDS = [
    ("schedule_timeout_s", ".inf"),
    ("schedule_timeout_s", ".nan"),
    ("image_pull_timeout_s", "1.0e+300"),
    ("image_pull_timeout_s", "0"),
]


@pytest.mark.parametrize(("key", "value"), POOL_SECONDS)
def test_pool_seconds_must_be_finite(key: str, value: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"^bridge\.yaml:10: pools\[0\]\.{key}: must be a positive"
    ):
        parse_config(MINIMAL + f"    {key}: {value}\n", "bridge.yaml")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SKB_BRIDGE_RECONCILE_INTERVAL_S": "inf"}, "bridge.reconcile_interval_s: must be a "),
        ({"SKB_BRIDGE_FAILED_NODE_HOLD_S": "nan"}, "bridge.failed_node_hold_s: must be a "),
        ({"SKB_BRIDGE_FAILED_NODE_HOLD_S": "1e300"}, "bridge.failed_node_hold_s: must be a "),
        ({"SKB_SLURM_COMMAND_TIMEOUT_S": "1e400"}, "slurm.command_timeout_s: must be a "),
        ({"SKB_BRIDGE_CREATE_CONCURRENCY": "1025"}, "must be a positive integer up to 1024"),
        ({"SKB_BRIDGE_CREATE_CONCURRENCY": "9" * 5000}, "got '999999999999999999999999"),
    ],
)
def test_environment_numbers_are_bounded(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(MINIMAL, "bridge.yaml", environ)
    assert str(caught.value).startswith(f"environment {next(iter(environ))}: ")
    assert message in str(caught.value)
    assert len(str(caught.value)) < 250


HOSTILE_YAML = [
    ("a: &x [*x]\n", "bridge.yaml:1: invalid YAML: alias *x is inside its own anchor"),
    ("a: &x {b: *x}\n", "bridge.yaml:1: invalid YAML: alias *x is inside its own anchor"),
    ("a: &x\n  - b\n  - *x\n", "bridge.yaml:3: invalid YAML: alias *x is inside its own anchor"),
    ("[" * 100_000, "bridge.yaml:1: invalid YAML: nested more than 64 levels deep"),
    ("- " * 1000 + "x\n", "bridge.yaml:1: invalid YAML: nested more than 64 levels deep"),
    (
        # A "billion laughs": ten aliases of ten aliases of ..., 10**9 values from 300 bytes.
        "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)),
        "the document expands (through its aliases) to more than 100000 values",
    ),
    (
        # Each alias nests the one before one level deeper: depth grows through aliases only.
        "a0: &a0 "
        + "[" * 40
        + "]" * 40
        + "\n"
        + "".join(f"a{i}: &a{i} " + "[" * 40 + f"*a{i - 1}" + "]" * 40 + "\n" for i in range(1, 5)),
        "the document expands (through its aliases) to more than 64 levels",
    ),
    ("cpus: " + "9" * 5000 + "\n", "bridge.yaml: invalid YAML value: "),
    ("when: 2026-02-30\n", "bridge.yaml: invalid YAML value: "),
    ("x" * (4 * 1024 * 1024 + 1), "bridge.yaml: 4194305 characters, more than the limit of"),
]


@pytest.mark.parametrize(("text", "message"), HOSTILE_YAML)
def test_hostile_yaml_gives_a_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "bridge.yaml")
    assert message in str(caught.value)
    assert len(str(caught.value)) < 250


@pytest.mark.parametrize(
    ("slurm", "template"),
    [
        # Another Secret, in a volume of a sidecar and in env.
        (
            "",
            "      spec:\n        volumes:\n          - name: tls\n"
            "            secret: {secretName: site-tls}\n        containers:\n"
            "          - name: log\n            image: busybox\n            volumeMounts:\n"
            "              - {name: tls, mountPath: /tls}\n            envFrom:\n"
            "              - secretRef: {name: site-env}\n",
        ),
        # Under munge a pool may still opt into auth/slurm from a Secret of its own.
        (
            "",
            "      spec:\n        volumes:\n          - name: slurm-key\n"
            "            secret: {secretName: pool-slurm-key}\n        containers:\n"
            "          - name: slurmd\n            env:\n              - name: SLURM_KEY_FILE\n"
            "                value: /etc/slurm-k8s-bridge/keys/slurm/slurm.key\n"
            "            volumeMounts:\n"
            "              - {name: slurm-key, mountPath: /etc/slurm-k8s-bridge/keys/slurm}\n",
        ),
        # The key Secrets are the ones the configuration names.
        (
            "  munge_key_secret: site-munge\n",
            "      spec:\n        volumes:\n          - name: old\n"
            "            secret: {secretName: slurm-munge-key}\n",
        ),
    ],
)
def test_templates_that_leave_the_key_to_the_bridge_are_accepted(slurm: str, template: str) -> None:
    text = "slurm:\n  conf_server: ctl:6817\n" + slurm + "pools:\n" + POOL
    config = parse_config(named(text + "    pod_template:\n" + template), "bridge.yaml")
    assert len(config.pools.pools) == 1


def test_the_key_secrets_named_in_the_environment_are_refused_in_templates() -> None:
    text = named(
        HEAD + POOL + "    pod_template:\n      spec:\n        volumes:\n          - name: k\n"
        "            secret: {secretName: site-munge}\n"
    )
    assert parse_config(text, "bridge.yaml").pools
    with pytest.raises(ConfigError, match="mounts the key Secret site-munge"):
        parse_config(text, "bridge.yaml", environ={"SKB_SLURM_MUNGE_KEY_SECRET": "site-munge"})


def test_aliases_that_share_a_template_still_work() -> None:
    text = MINIMAL.replace(
        "    image: localhost/slurmd:dev\n", "    image: &image localhost/slurmd:dev\n"
    )
    text += (
        "  - name: gpu\n    nodes: gpu-0\n    cpus: 1\n    real_memory_mb: 1\n    image: *image\n"
    )
    config = parse_config(text, "bridge.yaml")
    assert [pool.image for pool in config.pools] == ["localhost/slurmd:dev"] * 2


def test_load_config_reads_no_more_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(MINIMAL + "#" * (8 * 1024 * 1024))
    with pytest.raises(ConfigError, match=r"characters, more than the limit of 4194304"):
        load_config(path, environ={})


def test_settings_import_neither_pydantic_nor_yaml() -> None:
    # The hooks import bridge.settings on slurmctld's hot path: it must stay standard library.
    code = (
        "import sys, bridge.hooks, bridge.settings; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_one_default_socket_path() -> None:
    # grpc loads only for this test
    from bridge import hooks  # noqa: PLC0415
    from bridge.cli import main as cli  # noqa: PLC0415
    from bridge.rpc import client  # noqa: PLC0415

    assert settings.DEFAULT_TARGET == "unix:" + settings.DEFAULT_SOCKET_PATH
    assert hooks.DEFAULT_SOCKET == client.DEFAULT_TARGET == cli.DEFAULT_TARGET
    assert hooks.DEFAULT_SOCKET == settings.DEFAULT_TARGET
    assert BridgeSettings().socket == settings.DEFAULT_SOCKET_PATH


@pytest.mark.parametrize("name", ["[SLURM_NODENAME]", "{a: 1}"])
def test_template_env_names_that_are_not_strings_raise_no_type_error(name: str) -> None:
    # Once a TypeError (unhashable list) escaped template_problems instead of a ConfigError.
    text = (
        MINIMAL + "    pod_template:\n      spec:\n        containers:\n"
        f"          - name: slurmd\n            env:\n              - name: {name}\n"
    )
    (pool,) = parse_config(text, "bridge.yaml").pools
    assert pool.pod_template["spec"]["containers"][0]["env"][0]["name"] is not None


def test_pool_patience_is_kept_as_float_seconds() -> None:
    text = MINIMAL + "    schedule_timeout_s: 600\n    image_pull_timeout_s: 2.5\n"
    (pool,) = parse_config(text, "bridge.yaml").pools
    assert (pool.schedule_timeout_s, pool.image_pull_timeout_s) == (600.0, 2.5)
    assert isinstance(pool.schedule_timeout_s, float)


def test_allowed_callers_written_as_one_string_are_checked() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(MINIMAL + "bridge:\n  allowed_callers: 'a b'\n", "bridge.yaml")
    assert str(caught.value) == (
        "bridge.yaml:11: bridge.allowed_callers: 'a b' is neither a user name nor a uid"
    )


def test_leader_election_settings() -> None:
    text = (
        "cluster_name: lab\n"
        + HEAD
        + POOL
        + "kubernetes:\n  leader_election: true\n  leader_identity: ctl-a\n"
    )
    k8s = parse_config(text, "bridge.yaml").kubernetes
    assert (k8s.leader_election, k8s.lease("lab"), k8s.identity()) == (
        True,
        "slurm-k8s-bridge-lab",
        "ctl-a",
    )
    assert (k8s.lease_duration_s, k8s.lease_retry_s) == (15, 2.0)
    off = parse_config("cluster_name: lab\n" + HEAD + POOL, "bridge.yaml").kubernetes
    assert not off.leader_election
    assert off.identity()  # the host's name


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SKB_KUBERNETES_LEADER_ELECTION": "maybe"}, "must be true or false, got 'maybe'"),
        (
            {"SKB_KUBERNETES_LEASE_DURATION_S": "6", "SKB_KUBERNETES_LEASE_RETRY_S": "2"},
            "kubernetes.lease_retry_s: must be at most 1.33s with lease_duration_s 6",
        ),
        ({"SKB_KUBERNETES_LEASE_NAME": "Not_A_Name"}, "is not a valid Kubernetes object name"),
    ],
)
def test_leader_election_errors(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("cluster_name: lab\n" + HEAD + POOL, "bridge.yaml", environ)
    assert message in str(caught.value)


@pytest.mark.parametrize("text", ["yes", "TRUE", "1", "on"])
def test_leader_election_from_the_environment(text: str) -> None:
    config = parse_config(
        "cluster_name: lab\n" + HEAD + POOL, "bridge.yaml", {"SKB_KUBERNETES_LEADER_ELECTION": text}
    )
    assert config.kubernetes.leader_election


@pytest.mark.parametrize(
    ("lines", "environ", "setting"),
    [
        ("", {}, "auto"),
        ("kubernetes:\n  gang_scheduling: auto\n", {}, "auto"),
        ("kubernetes:\n  gang_scheduling: 'off'\n", {}, "off"),
        # YAML reads an unquoted off as false: the setting means off all the same.
        ("kubernetes:\n  gang_scheduling: off\n", {}, "off"),
        ("", {"SKB_KUBERNETES_GANG_SCHEDULING": "off"}, "off"),
        (
            "kubernetes:\n  gang_scheduling: 'off'\n",
            {"SKB_KUBERNETES_GANG_SCHEDULING": "auto"},
            "auto",
        ),
    ],
    ids=["default", "auto", "off-quoted", "off-unquoted", "env-off", "env-over-file"],
)
def test_gang_scheduling_setting(lines: str, environ: dict[str, str], setting: str) -> None:
    config = parse_config("cluster_name: lab\n" + HEAD + POOL + lines, "bridge.yaml", environ)
    assert config.kubernetes.gang_scheduling == setting


@pytest.mark.parametrize(
    ("lines", "environ", "message"),
    [
        (
            "kubernetes:\n  gang_scheduling: on\n",
            {},
            "bridge.yaml:11: kubernetes.gang_scheduling: must be auto (PodGroups when the API "
            "server serves them) or off, got True",
        ),
        (
            "kubernetes:\n  gang_scheduling: always\n",
            {},
            "bridge.yaml:11: kubernetes.gang_scheduling: must be auto (PodGroups when the API "
            "server serves them) or off, got 'always'",
        ),
        (
            "kubernetes:\n  gang_scheduling:\n",
            {},
            "bridge.yaml:11: kubernetes.gang_scheduling: must be set (null is not allowed here)",
        ),
        (
            "",
            {"SKB_KUBERNETES_GANG_SCHEDULING": "no"},
            "environment SKB_KUBERNETES_GANG_SCHEDULING: kubernetes.gang_scheduling: must be "
            "auto (PodGroups when the API server serves them) or off, got 'no'",
        ),
    ],
    ids=["yaml-on-is-true", "unknown-word", "null", "env-word"],
)
def test_gang_scheduling_errors_name_the_field(
    lines: str, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("cluster_name: lab\n" + HEAD + POOL + lines, "bridge.yaml", environ)
    assert str(caught.value) == message
