"""Pod rendering: the pool's template with the bridge's overlay on top."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bridge.domain.pod_rendering import (
    PodSettings,
    auth_template_problems,
    pool_template_hash,
    render_pod,
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
                    "command": ["/usr/local/bin/slurmd-entrypoint"],
                    "env": [
                        {"name": "SLURM_NODENAME", "value": "cpu-1"},
                        {"name": "SLURM_CONF_SERVER", "value": "10.213.0.1:6817"},
                        {"name": "SLURMD_EXTRA_ARGS", "value": ""},
                    ],
                    "volumeMounts": [
                        {"name": "munge-key", "mountPath": "/etc/munge-secret", "readOnly": True}
                    ],
                    "resources": {
                        "requests": {"cpu": "2", "memory": "1024Mi"},
                        "limits": {"cpu": "2", "memory": "1024Mi"},
                    },
                    "securityContext": {"privileged": True},
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
                {"name": "SLURMD_EXTRA_ARGS", "value": "-vvv"},
                {"name": "TZ", "value": "UTC"},
            ],
        ),
        (
            ("spec", "containers", 1, "volumeMounts"),
            [
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "munge-key", "mountPath": "/etc/munge-secret", "readOnly": True},
            ],
        ),
        (
            ("spec", "containers", 1, "resources"),
            {
                "requests": {"cpu": "2", "memory": "1024Mi"},
                "limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"},
            },
        ),
        (
            ("spec", "containers", 1, "securityContext"),
            {"capabilities": {"add": ["SYS_ADMIN"]}, "privileged": True},
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


def test_template_privileged_false_is_kept() -> None:
    template = {
        "spec": {"containers": [{"name": "slurmd", "securityContext": {"privileged": False}}]}
    }
    pod = render_pod(pool_with(template), "cpu-0", SETTINGS)
    assert slurmd(pod)["securityContext"] == {"privileged": False}
    assert slurmd(pod)["image"] == "localhost/slurmd:dev"


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
KEY_FILE_ENV = {"name": "SLURM_KEY_FILE", "value": "/etc/slurm-secret/slurm.key"}


@pytest.mark.parametrize(
    ("auth", "template", "volumes", "mounts", "env"),
    [
        (
            "munge",
            {},
            [MUNGE_VOLUME],
            [{"name": "munge-key", "mountPath": "/etc/munge-secret", "readOnly": True}],
            ["SLURM_NODENAME", "SLURM_CONF_SERVER", "SLURMD_EXTRA_ARGS"],
        ),
        (
            "slurm",
            {},
            [SLURM_KEY_VOLUME],
            [{"name": "slurm-key", "mountPath": "/etc/slurm-secret", "readOnly": True}],
            ["SLURM_NODENAME", "SLURM_CONF_SERVER", "SLURM_KEY_FILE", "SLURMD_EXTRA_ARGS"],
        ),
        # The template's own volumes and mounts stay, before the bridge's key.
        (
            "slurm",
            FULL_TEMPLATE,
            [{"name": "scratch", "emptyDir": {}}, SLURM_KEY_VOLUME],
            [
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "slurm-key", "mountPath": "/etc/slurm-secret", "readOnly": True},
            ],
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
            [{"name": "munge-key", "mountPath": "/etc/munge-secret", "readOnly": True}],
            ["SLURM_NODENAME", "SLURM_CONF_SERVER", "SLURMD_EXTRA_ARGS", "SLURM_KEY_FILE"],
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
    if auth == "slurm":
        assert KEY_FILE_ENV in container["env"]


@pytest.mark.parametrize(
    ("auth", "template", "problems"),
    [
        ("munge", {"spec": {"volumes": [{"name": "slurm-key"}]}}, []),
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
    ],
)
def test_auth_template_problems(auth: str, template: dict[str, Any], problems: list[Any]) -> None:
    assert auth_template_problems(template, auth) == problems


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
    # Pinned: the hash must not depend on the process (no hash(), no dict order).
    assert pool_template_hash(pool, SETTINGS) == "b7260f7e67"
    hashes = {
        render_pod(pool, node, SETTINGS)["metadata"]["labels"][LABEL_TEMPLATE_HASH]
        for node in pool.node_names
    }
    assert hashes == {"b7260f7e67"}
    bigger = NodePool.create(
        name="cpu", nodes="cpu-[0-3]", cpus=4, real_memory_mb=1024, image="localhost/slurmd:dev"
    )
    assert pool_template_hash(bigger, SETTINGS) != "b7260f7e67"


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
