"""Pod rendering: the pool's template with the bridge's overlay on top."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bridge.domain.pod_rendering import PodSettings, pool_template_hash, render_pod
from bridge.domain.pod_templates import (
    auth_template_problems,
    key_template_problems,
    template_image,
    template_problems,
)
from bridge.domain.pods import (
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_NODE,
    LABEL_POOL,
    LABEL_TEMPLATE_HASH,
)
from bridge.domain.pools import NodePool

SETTINGS = PodSettings(namespace="hpc", cluster_name="prod", conf_server="10.213.0.1:6817")
#: What slurmd gets when its template says nothing about privileges.
UNPRIVILEGED: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {
        "drop": ["ALL"],
        "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"],
    },
}
MUNGE_MOUNT = {
    "name": "munge-key",
    "mountPath": "/etc/slurm-k8s-bridge/keys/munge",
    "readOnly": True,
}
MUNGE_KEY_FILE_ENV = {
    "name": "MUNGE_KEY_FILE",
    "value": "/etc/slurm-k8s-bridge/keys/munge/munge.key",
}


def pool_with(template: dict[str, Any], image: str = "localhost/slurmd:dev") -> NodePool:
    return NodePool.create(
        name="cpu",
        nodes="cpu-[0-3]",
        cpus=2,
        real_memory_mb=1024,
        image=image,
        pod_template=template,
    )


def slurmd(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "slurmd"]
    assert isinstance(container, dict)
    return container


def test_empty_template_renders_the_whole_pod() -> None:
    pod = render_pod(pool_with({}), "cpu-1", SETTINGS)
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "cpu-1",
            "namespace": "hpc",
            "labels": {
                LABEL_MANAGED_BY: "slurm-k8s-bridge",
                LABEL_CLUSTER: "prod",
                LABEL_POOL: "cpu",
                LABEL_NODE: "cpu-1",
                LABEL_TEMPLATE_HASH: pool_template_hash(pool_with({}), SETTINGS),
            },
            "annotations": {"kubectl.kubernetes.io/default-container": "slurmd"},
        },
        "spec": {
            "hostname": "cpu-1",
            # The headless Service's domain is searched, so node names resolve in every pod.
            "subdomain": "slurm-nodes",
            "dnsConfig": {"searches": ["slurm-nodes.hpc.svc.cluster.local"]},
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 10,
            # NotReady until its slurmd registered (the reconciler sets the condition).
            "readinessGates": [{"conditionType": "slurm-k8s-bridge.io/registered"}],
            "containers": [
                {
                    "name": "slurmd",
                    "image": "localhost/slurmd:dev",
                    # No command: the image's ENTRYPOINT runs.
                    "env": [
                        {"name": "SLURM_NODENAME", "value": "cpu-1"},
                        {"name": "SLURM_CONF_SERVER", "value": "10.213.0.1:6817"},
                        MUNGE_KEY_FILE_ENV,
                        {"name": "SLURMD_EXTRA_ARGS", "value": ""},
                    ],
                    # Below a directory only root may enter: jobs run in this container.
                    "volumeMounts": [MUNGE_MOUNT],
                    "resources": {
                        "requests": {"cpu": "2", "memory": "1024Mi"},
                        "limits": {"cpu": "2", "memory": "1024Mi"},
                    },
                    "securityContext": UNPRIVILEGED,
                }
            ],
            "volumes": [
                {
                    "name": "munge-key",
                    "secret": {
                        "secretName": "slurm-munge-key",
                        "items": [{"key": "munge.key", "path": "munge.key"}],
                        "defaultMode": 0o400,
                    },
                }
            ],
        },
    }
    json.dumps(pod)  # plain JSON, nothing else


FULL_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "hpc"}, "annotations": {"note": "x"}},
    "spec": {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {}},
        "terminationGracePeriodSeconds": 60,
        "automountServiceAccountToken": True,
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "containers": [
            {"name": "sidecar", "image": "busybox"},
            {
                "name": "slurmd",
                "image": "custom:1",
                "command": ["/my-entrypoint"],
                "env": [
                    {"name": "SLURMD_EXTRA_ARGS", "value": "-vvv"},
                    {"name": "TZ", "value": "UTC"},
                ],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "2Gi"}},
                "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
            },
        ],
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("metadata", "labels", "team"), "hpc"),
        (("metadata", "labels", LABEL_NODE), "cpu-2"),
        (("metadata", "annotations", "note"), "x"),
        (("spec", "nodeSelector"), {"kubernetes.io/os": "linux"}),
        (("spec", "tolerations"), [{"key": "dedicated", "operator": "Exists"}]),
        (("spec", "affinity"), {"nodeAffinity": {}}),
        (("spec", "terminationGracePeriodSeconds"), 60),
        (("spec", "automountServiceAccountToken"), True),
        (("spec", "enableServiceLinks"), False),
        (("spec", "hostname"), "cpu-2"),
        (("spec", "restartPolicy"), "Never"),
        (("spec", "containers", 0, "name"), "sidecar"),
        (("spec", "containers", 1, "image"), "custom:1"),
        (("spec", "containers", 1, "command"), ["/my-entrypoint"]),
        (
            ("spec", "containers", 1, "env"),
            [
                {"name": "SLURM_NODENAME", "value": "cpu-2"},
                {"name": "SLURM_CONF_SERVER", "value": "10.213.0.1:6817"},
                MUNGE_KEY_FILE_ENV,
                {"name": "SLURMD_EXTRA_ARGS", "value": "-vvv"},
                {"name": "TZ", "value": "UTC"},
            ],
        ),
        (
            ("spec", "containers", 1, "volumeMounts"),
            [{"name": "scratch", "mountPath": "/scratch"}, MUNGE_MOUNT],
        ),
        (
            ("spec", "containers", 1, "resources"),
            {
                "requests": {"cpu": "2", "memory": "1024Mi"},
                "limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"},
            },
        ),
        # The template's capabilities are its choice: nothing added, nothing dropped.
        (
            ("spec", "containers", 1, "securityContext"),
            {"capabilities": {"add": ["SYS_ADMIN"]}},
        ),
        (("spec", "volumes", 0, "name"), "scratch"),
        (("spec", "volumes", 1, "name"), "munge-key"),
    ],
)
def test_template_merge(path: tuple[str | int, ...], expected: Any) -> None:
    value: Any = render_pod(pool_with(FULL_TEMPLATE), "cpu-2", SETTINGS)
    for part in path:
        value = value[part]
    assert value == expected


@pytest.mark.parametrize(
    ("security", "rendered"),
    [
        pytest.param(None, UNPRIVILEGED, id="none:unprivileged"),
        pytest.param({}, UNPRIVILEGED, id="empty:unprivileged"),
        # Kept, and not loosened: the bridge adds its own keys after the template's.
        pytest.param(
            {"runAsUser": 0, "readOnlyRootFilesystem": True},
            {"runAsUser": 0, "readOnlyRootFilesystem": True, **UNPRIVILEGED},
            id="other-keys:kept-and-unprivileged",
        ),
        pytest.param(
            {"allowPrivilegeEscalation": True},
            {"allowPrivilegeEscalation": True, "capabilities": UNPRIVILEGED["capabilities"]},
            id="escalation:the-template's",
        ),
        # null in YAML sets nothing.
        pytest.param(
            {"privileged": None, "capabilities": None},
            {"privileged": None, **UNPRIVILEGED},
            id="nulls:unprivileged",
        ),
        # Privileged (cgroup confinement on cgroup v1) or capabilities: exactly the template's.
        pytest.param({"privileged": True}, {"privileged": True}, id="privileged:kept"),
        pytest.param({"privileged": False}, {"privileged": False}, id="not-privileged:kept"),
        pytest.param(
            {"capabilities": {"add": ["SYS_NICE"]}, "runAsUser": 0},
            {"capabilities": {"add": ["SYS_NICE"]}, "runAsUser": 0},
            id="capabilities:kept",
        ),
        pytest.param({"capabilities": {}}, {"capabilities": {}}, id="empty-capabilities:kept"),
    ],
)
def test_slurmd_runs_unprivileged_unless_its_template_chooses(
    security: dict[str, Any] | None, rendered: dict[str, Any]
) -> None:
    container: dict[str, Any] = {"name": "slurmd"}
    if security is not None:
        container["securityContext"] = security
    pod = render_pod(pool_with({"spec": {"containers": [container]}}), "cpu-0", SETTINGS)
    assert slurmd(pod)["securityContext"] == rendered
    assert slurmd(pod)["image"] == "localhost/slurmd:dev"


@pytest.mark.parametrize(
    ("container", "command"),
    [
        pytest.param({"name": "slurmd"}, None, id="none:the-image's-entrypoint"),
        pytest.param(
            {"name": "slurmd", "command": ["/my-entrypoint"], "args": ["-x"]},
            (["/my-entrypoint"], ["-x"]),
            id="the-template's:kept",
        ),
    ],
)
def test_slurmd_runs_the_images_entrypoint_unless_the_template_sets_a_command(
    container: dict[str, Any], command: tuple[list[str], list[str]] | None
) -> None:
    pod = render_pod(pool_with({"spec": {"containers": [container]}}), "cpu-0", SETTINGS)
    rendered = slurmd(pod)
    if command is None:
        assert "command" not in rendered and "args" not in rendered
    else:
        assert (rendered["command"], rendered["args"]) == command


def test_rendering_never_mutates_inputs() -> None:
    template = copy.deepcopy(FULL_TEMPLATE)
    pool = pool_with(template)
    before = copy.deepcopy(dict(pool.pod_template))
    first = render_pod(pool, "cpu-0", SETTINGS)
    first["spec"]["containers"][1]["env"].append({"name": "X"})
    first["metadata"]["labels"]["x"] = "y"
    second = render_pod(pool, "cpu-1", SETTINGS)
    assert dict(pool.pod_template) == before
    assert template == FULL_TEMPLATE
    assert {"name": "X"} not in second["spec"]["containers"][1]["env"]
    assert "x" not in second["metadata"]["labels"]


def test_node_outside_the_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="'gpu-0' is not in pool 'cpu'"):
        render_pod(pool_with({}), "gpu-0", SETTINGS)


@pytest.mark.parametrize(
    ("template", "problems"),
    [
        ({}, []),
        ({"metadata": None, "spec": None}, []),
        (FULL_TEMPLATE, []),
        (
            {"kind": "Pod"},
            [(("kind",), "unknown key; a pod template has only 'metadata' and 'spec'")],
        ),
        (
            {"metadata": {"name": "x"}},
            [
                (
                    ("metadata", "name"),
                    "the bridge sets the pod's identity; only labels and annotations may be given",
                )
            ],
        ),
        (
            {"metadata": {"labels": {"gpu": True}}},
            [(("metadata", "labels", "gpu"), "must be a string, got True (quote it)")],
        ),
        (
            {"metadata": {"labels": {LABEL_POOL: "x"}}},
            [(("metadata", "labels", LABEL_POOL), "the bridge sets this label")],
        ),
        ({"spec": []}, [(("spec",), "must be a mapping")]),
        (
            {"spec": {"hostname": "x"}},
            [(("spec", "hostname"), "the bridge sets it to the node name")],
        ),
        (
            {"spec": {"subdomain": "x"}},
            [(("spec", "subdomain"), "the bridge sets it to kubernetes.node_service")],
        ),
        (
            {"spec": {"schedulingGroup": {"podGroupName": "all-of-them"}}},
            [
                (
                    ("spec", "schedulingGroup"),
                    "the bridge sets it: a job's nodes share the job's PodGroup "
                    "(kubernetes.gang_scheduling)",
                )
            ],
        ),
        (
            {"spec": {"restartPolicy": "Always"}},
            [
                (
                    ("spec", "restartPolicy"),
                    "must be Never: a crashed slurmd has to surface as a failure, not restart",
                )
            ],
        ),
        ({"spec": {"restartPolicy": "Never"}}, []),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            [(("spec", "containers", 0), "must be a container with a name")],
        ),
        (
            {"spec": {"containers": [{"name": "slurmd", "env": [{"name": "SLURM_NODENAME"}]}]}},
            [
                (
                    ("spec", "containers", 0, "env", 0, "name"),
                    "SLURM_NODENAME is set by the bridge",
                )
            ],
        ),
        (
            {"spec": {"volumes": [{"name": "munge-key"}]}},
            [(("spec", "volumes", 0, "name"), "'munge-key' is the bridge's volume")],
        ),
    ],
)
def test_template_problems(template: dict[str, Any], problems: list[Any]) -> None:
    assert template_problems(template) == problems


@pytest.mark.parametrize(
    ("template", "image"),
    [
        ({}, ""),
        ({"spec": {"containers": [{"name": "other", "image": "a"}]}}, ""),
        ({"spec": {"containers": [{"name": "slurmd", "image": "b"}]}}, "b"),
    ],
)
def test_template_image(template: dict[str, Any], image: str) -> None:
    assert template_image(template) == image


def test_the_templates_own_dns_searches_stay_after_the_node_domain() -> None:
    pool = NodePool.create(
        name="cpu",
        nodes="cpu-[0-1]",
        cpus=2,
        real_memory_mb=1024,
        image="localhost/s:1",
        pod_template={"spec": {"dnsConfig": {"searches": ["site.example"], "options": []}}},
    )
    settings = PodSettings(namespace="hpc", cluster_name="prod", conf_server="10.0.0.1")
    spec = render_pod(pool, "cpu-0", settings)["spec"]
    assert spec["dnsConfig"] == {
        "searches": ["slurm-nodes.hpc.svc.cluster.local", "site.example"],
        "options": [],
    }


def test_no_node_service_means_no_subdomain() -> None:
    pool = NodePool.create(
        name="cpu", nodes="cpu-0", cpus=2, real_memory_mb=1024, image="localhost/s:1"
    )
    settings = PodSettings(
        namespace="hpc", cluster_name="prod", conf_server="10.0.0.1", node_service=""
    )
    spec = render_pod(pool, "cpu-0", settings)["spec"]
    assert "subdomain" not in spec and "dnsConfig" not in spec


@pytest.mark.parametrize(
    ("gates", "rendered"),
    [
        pytest.param(None, ["slurm-k8s-bridge.io/registered"], id="none:ours"),
        pytest.param(
            [{"conditionType": "example.com/storage"}],
            ["example.com/storage", "slurm-k8s-bridge.io/registered"],
            id="the-template's-kept:ours-after",
        ),
        pytest.param(
            [{"conditionType": "slurm-k8s-bridge.io/registered"}],
            ["slurm-k8s-bridge.io/registered"],
            id="ours-already:once",
        ),
    ],
)
def test_pods_carry_the_registered_readiness_gate(
    gates: list[dict[str, str]] | None, rendered: list[str]
) -> None:
    template: dict[str, Any] = {"spec": {"readinessGates": gates}} if gates else {}
    pod = render_pod(pool_with(template), "cpu-1", SETTINGS)
    assert [g["conditionType"] for g in pod["spec"]["readinessGates"]] == rendered


MUNGE_VOLUME = {
    "name": "munge-key",
    "secret": {
        "secretName": "slurm-munge-key",
        "items": [{"key": "munge.key", "path": "munge.key"}],
        "defaultMode": 0o400,
    },
}
SLURM_KEY_VOLUME = {
    "name": "slurm-key",
    "secret": {
        "secretName": "cluster-key",
        "items": [{"key": "slurm.key", "path": "slurm.key"}],
        "defaultMode": 0o400,
    },
}
SLURM_KEY_MOUNT = {
    "name": "slurm-key",
    "mountPath": "/etc/slurm-k8s-bridge/keys/slurm",
    "readOnly": True,
}
KEY_FILE_ENV = {"name": "SLURM_KEY_FILE", "value": "/etc/slurm-k8s-bridge/keys/slurm/slurm.key"}


@pytest.mark.parametrize(
    ("auth", "template", "volumes", "mounts", "env"),
    [
        (
            "munge",
            {},
            [MUNGE_VOLUME],
            [MUNGE_MOUNT],
            ["SLURM_NODENAME", "SLURM_CONF_SERVER", "MUNGE_KEY_FILE", "SLURMD_EXTRA_ARGS"],
        ),
        (
            "slurm",
            {},
            [SLURM_KEY_VOLUME],
            [SLURM_KEY_MOUNT],
            ["SLURM_NODENAME", "SLURM_CONF_SERVER", "SLURM_KEY_FILE", "SLURMD_EXTRA_ARGS"],
        ),
        # The template's own volumes and mounts stay, before the bridge's key.
        (
            "slurm",
            FULL_TEMPLATE,
            [{"name": "scratch", "emptyDir": {}}, SLURM_KEY_VOLUME],
            [{"name": "scratch", "mountPath": "/scratch"}, SLURM_KEY_MOUNT],
            ["SLURM_NODENAME", "SLURM_CONF_SERVER", "SLURM_KEY_FILE", "SLURMD_EXTRA_ARGS", "TZ"],
        ),
        # Under munge a pool may still opt into auth/slurm itself (its own volume and env).
        (
            "munge",
            {
                "spec": {
                    "volumes": [{"name": "slurm-key", "secret": {"secretName": "k"}}],
                    "containers": [{"name": "slurmd", "env": [KEY_FILE_ENV]}],
                }
            },
            [{"name": "slurm-key", "secret": {"secretName": "k"}}, MUNGE_VOLUME],
            [MUNGE_MOUNT],
            [
                "SLURM_NODENAME",
                "SLURM_CONF_SERVER",
                "MUNGE_KEY_FILE",
                "SLURMD_EXTRA_ARGS",
                "SLURM_KEY_FILE",
            ],
        ),
        # A template's own key file variable (refused by the config) gives way to the bridge's.
        (
            "munge",
            {
                "spec": {
                    "containers": [
                        {"name": "slurmd", "env": [{"name": "MUNGE_KEY_FILE", "value": "/k"}]}
                    ]
                }
            },
            [MUNGE_VOLUME],
            [MUNGE_MOUNT],
            ["SLURM_NODENAME", "SLURM_CONF_SERVER", "MUNGE_KEY_FILE", "SLURMD_EXTRA_ARGS"],
        ),
    ],
)
def test_the_pods_mount_the_key_of_the_clusters_auth(
    auth: str,
    template: dict[str, Any],
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    env: list[str],
) -> None:
    settings = PodSettings(
        namespace="hpc",
        cluster_name="prod",
        conf_server="10.213.0.1:6817",
        auth=auth,
        slurm_key_secret="cluster-key",  # noqa: S106 (a Secret's name)
    )
    pod = render_pod(pool_with(template), "cpu-1", settings)
    container = slurmd(pod)
    assert pod["spec"]["volumes"] == volumes
    assert container["volumeMounts"] == mounts
    assert [e["name"] for e in container["env"]] == env
    assert (KEY_FILE_ENV if auth == "slurm" else MUNGE_KEY_FILE_ENV) in container["env"]


@pytest.mark.parametrize(
    ("auth", "template", "problems"),
    [
        ("munge", {"spec": {"volumes": [{"name": "slurm-key"}]}}, []),
        # Under munge a pool may still opt into auth/slurm itself: SLURM_KEY_FILE is its own.
        ("munge", {"spec": {"containers": [{"name": "slurmd", "env": [KEY_FILE_ENV]}]}}, []),
        (
            "munge",
            {"spec": {"containers": [{"name": "slurmd", "env": [MUNGE_KEY_FILE_ENV]}]}},
            [
                (
                    ("spec", "containers", 0, "env", 0, "name"),
                    "MUNGE_KEY_FILE is set by the bridge with slurm.auth: munge",
                )
            ],
        ),
        # Another container may use the name: the bridge owns only slurmd's.
        ("munge", {"spec": {"containers": [{"name": "log", "env": [MUNGE_KEY_FILE_ENV]}]}}, []),
        ("slurm", {"spec": {"containers": [{"name": "slurmd", "env": [MUNGE_KEY_FILE_ENV]}]}}, []),
        (
            "slurm",
            {"spec": {"volumes": [{"name": "scratch"}, {"name": "slurm-key"}]}},
            [
                (
                    ("spec", "volumes", 1, "name"),
                    "'slurm-key' is set by the bridge with slurm.auth: slurm",
                )
            ],
        ),
        (
            "slurm",
            {
                "spec": {
                    "containers": [
                        {
                            "name": "slurmd",
                            "env": [{"name": "TZ"}, KEY_FILE_ENV],
                            "volumeMounts": [{"name": "slurm-key", "mountPath": "/k"}],
                        },
                        # Another container may use the name: the bridge owns only slurmd's.
                        {"name": "sidecar", "env": [KEY_FILE_ENV]},
                    ]
                }
            },
            [
                (
                    ("spec", "containers", 0, "env", 1, "name"),
                    "SLURM_KEY_FILE is set by the bridge with slurm.auth: slurm",
                ),
                (
                    ("spec", "containers", 0, "volumeMounts", 0, "name"),
                    "'slurm-key' is set by the bridge with slurm.auth: slurm",
                ),
            ],
        ),
        ("slurm", {}, []),
        ("munge", {"spec": {"containers": "x", "volumes": {}}}, []),
    ],
)
def test_auth_template_problems(auth: str, template: dict[str, Any], problems: list[Any]) -> None:
    assert auth_template_problems(template, auth) == problems


KEY_SECRETS = ("slurm-munge-key", "slurm-key")
MOUNTED = "mounts the key Secret {}; only the bridge mounts it, into slurmd alone"
READ = "reads the key Secret {}; only the bridge mounts it, into slurmd alone"
IN_SLURMD_ONLY = "{!r} is the key's volume: only the slurmd container mounts it"


def _containers(kind: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {kind: list(containers)}}


@pytest.mark.parametrize(
    ("template", "problems"),
    [
        pytest.param({}, [], id="empty"),
        pytest.param(FULL_TEMPLATE, [], id="full-template"),
        pytest.param({"spec": None}, [], id="spec-null"),
        # (a) A volume of a key Secret, plain or projected.
        pytest.param(
            {"spec": {"volumes": [{"name": "k", "secret": {"secretName": "slurm-munge-key"}}]}},
            [(("spec", "volumes", 0, "secret", "secretName"), MOUNTED.format("slurm-munge-key"))],
            id="volume-of-the-munge-secret",
        ),
        pytest.param(
            {
                "spec": {
                    "volumes": [
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "k", "secret": {"secretName": "slurm-key", "defaultMode": 0o400}},
                    ]
                }
            },
            [(("spec", "volumes", 1, "secret", "secretName"), MOUNTED.format("slurm-key"))],
            id="volume-of-the-slurm-key-secret",
        ),
        pytest.param(
            {
                "spec": {
                    "volumes": [
                        {
                            "name": "all",
                            "projected": {
                                "sources": [
                                    {"configMap": {"name": "slurm-conf"}},
                                    {"secret": {"name": "slurm-key"}},
                                ]
                            },
                        }
                    ]
                }
            },
            [
                (
                    ("spec", "volumes", 0, "projected", "sources", 1, "secret", "name"),
                    MOUNTED.format("slurm-key"),
                )
            ],
            id="projected-key-secret",
        ),
        pytest.param(
            {
                "spec": {
                    "volumes": [
                        {"name": "tls", "secret": {"secretName": "site-tls"}},
                        {"name": "p", "projected": {"sources": [{"secret": {"name": "site-tls"}}]}},
                        {"name": "odd", "secret": {"secretName": ["slurm-key"]}},
                        {"name": "odd2", "projected": {"sources": "slurm-key"}},
                    ]
                }
            },
            [],
            id="other-secrets-and-odd-shapes:accepted",
        ),
        # (b) The bridge's key volumes in any container but slurmd.
        pytest.param(
            _containers(
                "containers",
                {"name": "slurmd", "volumeMounts": [{"name": "munge-key", "mountPath": "/k"}]},
                {"name": "log", "volumeMounts": [{"name": "munge-key", "mountPath": "/k"}]},
            ),
            [
                (
                    ("spec", "containers", 1, "volumeMounts", 0, "name"),
                    IN_SLURMD_ONLY.format("munge-key"),
                )
            ],
            id="sidecar-mounts-munge-key",
        ),
        pytest.param(
            _containers(
                "initContainers",
                {"name": "prep", "volumeMounts": [{"name": "scratch"}, {"name": "slurm-key"}]},
            ),
            [
                (
                    ("spec", "initContainers", 0, "volumeMounts", 1, "name"),
                    IN_SLURMD_ONLY.format("slurm-key"),
                )
            ],
            id="init-container-mounts-slurm-key",
        ),
        # An init container named slurmd is not the slurmd container.
        pytest.param(
            _containers(
                "initContainers", {"name": "slurmd", "volumeMounts": [{"name": "munge-key"}]}
            ),
            [
                (
                    ("spec", "initContainers", 0, "volumeMounts", 0, "name"),
                    IN_SLURMD_ONLY.format("munge-key"),
                )
            ],
            id="init-container-named-slurmd",
        ),
        pytest.param(
            _containers(
                "containers",
                {"name": "log", "volumeMounts": [{"name": "scratch"}, {"name": ["munge-key"]}]},
            ),
            [],
            id="sidecar-other-mounts:accepted",
        ),
        # (c) A key Secret in env or envFrom, in any container (slurmd's too).
        pytest.param(
            _containers(
                "containers",
                {
                    "name": "slurmd",
                    "env": [
                        {"name": "TZ", "value": "UTC"},
                        {
                            "name": "KEY",
                            "valueFrom": {
                                "secretKeyRef": {"name": "slurm-munge-key", "key": "munge.key"}
                            },
                        },
                    ],
                },
            ),
            [
                (
                    ("spec", "containers", 0, "env", 1, "valueFrom", "secretKeyRef", "name"),
                    READ.format("slurm-munge-key"),
                )
            ],
            id="slurmd-env-from-the-munge-secret",
        ),
        pytest.param(
            _containers(
                "initContainers",
                {"name": "prep", "envFrom": [{"configMapRef": {"name": "c"}}]},
                {"name": "prep2", "envFrom": [{"secretRef": {"name": "slurm-key"}}]},
            ),
            [
                (
                    ("spec", "initContainers", 1, "envFrom", 0, "secretRef", "name"),
                    READ.format("slurm-key"),
                )
            ],
            id="init-container-env-from-the-slurm-key-secret",
        ),
        pytest.param(
            _containers(
                "containers",
                {
                    "name": "log",
                    "env": [
                        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "site-token"}}},
                        {"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "Q", "valueFrom": None},
                    ],
                    "envFrom": [{"secretRef": {"name": "site-env"}}, "x"],
                },
            ),
            [],
            id="other-secrets-in-env:accepted",
        ),
        pytest.param(
            {"spec": {"containers": [None, "x"], "initContainers": {}, "volumes": [None]}},
            [],
            id="odd-shapes:template_problems-tells",
        ),
    ],
)
def test_key_template_problems(template: dict[str, Any], problems: list[Any]) -> None:
    assert key_template_problems(template, KEY_SECRETS) == problems


def _changed_pool(change: str) -> NodePool:
    base = {"spec": {"containers": [{"name": "slurmd", "env": [{"name": "A", "value": "1"}]}]}}
    template = copy.deepcopy(base)
    image = "localhost/slurmd:dev"
    if change == "env":
        template["spec"]["containers"][0]["env"].append({"name": "SKB_ROLLOUT_MARK", "value": "2"})
    elif change == "image":
        image = "localhost/slurmd:next"
    elif change == "volume":
        template["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    elif change == "label":
        template["metadata"] = {"labels": {"team": "hpc"}}
    return pool_with(template, image=image)


@pytest.mark.parametrize(
    ("change", "same_hash"),
    [
        ("nothing", True),
        ("env", False),
        ("image", False),
        ("volume", False),
        ("label", False),
    ],
)
def test_template_hash_follows_what_the_pool_puts_into_the_pod(
    change: str, same_hash: bool
) -> None:
    before = pool_template_hash(_changed_pool("nothing"), SETTINGS)
    assert (pool_template_hash(_changed_pool(change), SETTINGS) == before) is same_hash


def test_template_hash_is_short_stable_and_the_same_for_every_node() -> None:
    pool = pool_with({})
    # Pinned: the hash must not depend on the process (no hash(), no dict order). It changes
    # with what the bridge puts into every pod (last: the unprivileged slurmd, the key's place).
    pinned = "ebd658e535"
    assert pool_template_hash(pool, SETTINGS) == pinned
    hashes = {
        render_pod(pool, node, SETTINGS)["metadata"]["labels"][LABEL_TEMPLATE_HASH]
        for node in pool.node_names
    }
    assert hashes == {pinned}
    bigger = NodePool.create(
        name="cpu", nodes="cpu-[0-3]", cpus=4, real_memory_mb=1024, image="localhost/slurmd:dev"
    )
    assert pool_template_hash(bigger, SETTINGS) != pinned


def test_a_template_may_not_set_the_template_hash_label() -> None:
    template = {"metadata": {"labels": {LABEL_TEMPLATE_HASH: "0000000000"}}}
    assert template_problems(template) == [
        (("metadata", "labels", LABEL_TEMPLATE_HASH), "the bridge sets this label")
    ]


@pytest.mark.parametrize(
    ("gres", "template_resources", "expected"),
    [
        ((), {}, {"cpu": "2", "memory": "1024Mi"}),
        (("gpu:a100:2",), {}, {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": "2"}),
        # The template has the last word, as for cpu and memory.
        (
            ("gpu:2",),
            {"nvidia.com/gpu": "1"},
            {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": "1"},
        ),
    ],
)
def test_a_pool_s_gres_is_requested_and_limited_on_slurmd(
    gres: tuple[str, ...], template_resources: dict[str, str], expected: dict[str, str]
) -> None:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "slurmd"}]}}
    if template_resources:
        template["spec"]["containers"][0]["resources"] = {
            "requests": template_resources,
            "limits": template_resources,
        }
    pool = NodePool.create(
        name="gpu",
        nodes="gpu-[0-1]",
        cpus=2,
        real_memory_mb=1024,
        image="i",
        gres=gres,
        pod_template=template,
    )
    (slurmd,) = render_pod(pool, "gpu-0", SETTINGS)["spec"]["containers"]
    assert slurmd["resources"] == {"requests": expected, "limits": expected}
