"""The Kubernetes part: etcd, API server, controller manager, scheduler, one real node
(containerd + kubelet) and kwok's simulated nodes, all as local processes we start and stop."""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import urllib.request
from pathlib import Path

from . import bridge_image, images
from .layout import (
    APISERVER_PORT,
    CLUSTER_DOMAIN,
    DEFAULT_KUBERNETES,
    ETCD_PEER_PORT,
    ETCD_PORT,
    HOST_IP,
    KUBERNETES_VERSIONS,
    KWOK_NODES,
    POD_SUBNET,
    REAL_NODE,
    SERVICE_SUBNET,
    Layout,
)
from .pki import kubeconfig
from .processes import ProvingGroundError, State, run, start_daemon, wait_until

log = logging.getLogger(__name__)

APISERVER_URL = f"https://127.0.0.1:{APISERVER_PORT}"
#: Labels and taint that keep ordinary pods off the simulated nodes.
KWOK_LABEL = ("type", "kwok")
KWOK_TAINT = ("kwok.x-k8s.io/node", "fake")
#: kwok's pod lifecycle on the ground: its defaults, but readiness gates left to their owners.
KWOK_POD_STAGES = Path(__file__).resolve().with_name("kwok-pod-stages.yaml")
#: Gang scheduling where the control plane has it (issue 34): the PodGroup API and the scheduler's
#: GangScheduling plugin sit behind the GenericWorkload gate (alpha in 1.35, beta but off by
#: default in 1.37), and a beta API is served only when asked for. 1.34 knows neither the gate
#: nor the API (an unknown gate stops a daemon), so it gets none.
GANG_APISERVER_FLAGS = {
    "1.37": (
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ),
}
GENERIC_WORKLOAD_FLAGS = {"1.37": ("--feature-gates=GenericWorkload=true",)}
#: The scheduler's own API rate, as a site that runs bursts of batch pods sets it. At the
#: default (50 requests/s) it binds at most 50 pods a second, and a bench's rounds (3,000 pods a
#: minute) left it far behind: seen, "Failed to bind pod ... not found" every 20 ms for pods
#: deleted long before, 117,000 times in a day's log, while a later test's pods waited in its
#: queue past the test's timeout.
SCHEDULER_API_RATE_FLAGS = ("--kube-api-qps=500", "--kube-api-burst=1000")
#: The state file's record of the running control plane; grounds from before the matrix ran 1.34.
KUBERNETES_KEY = "kubernetes"
RECORDED_BEFORE_THE_MATRIX = "1.34"


def kubernetes_from_env() -> str:
    """``SKB_K8S`` (``make up K8S=1.34`` sets it), else the default; refuses others."""
    minor = os.environ.get("SKB_K8S") or DEFAULT_KUBERNETES
    if minor not in KUBERNETES_VERSIONS:
        raise ProvingGroundError(
            f"K8S={minor}: not a Kubernetes the proving ground runs "
            f"(choose one of {', '.join(KUBERNETES_VERSIONS)})"
        )
    return minor


def running_kubernetes(state: State) -> str:
    """The control plane's minor the ground last started."""
    return str(state.data.get(KUBERNETES_KEY, RECORDED_BEFORE_THE_MATRIX))


def _https_ok(layout: Layout, url: str) -> bool:
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    with urllib.request.urlopen(url, context=context, timeout=2) as response:  # noqa: S310
        return bool(response.status == 200)


def kubectl(
    layout: Layout,
    *args: str,
    check: bool = True,
    input_text: str | None = None,
    timeout_s: float = 120.0,
) -> str:
    argv = [str(layout.kubernetes_bin / "kubectl"), f"--kubeconfig={layout.kubeconfig}", *args]
    return run(argv, check=check, input_text=input_text, timeout_s=timeout_s).stdout


def write_kubeconfigs(layout: Layout) -> None:
    for client in (
        "admin",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kwok",
        "kube-proxy",
    ):
        target = layout.local / "kubeconfigs" / f"{client}.kubeconfig"
        target.parent.mkdir(parents=True, exist_ok=True)
        on_node = client in ("kubelet", "kube-proxy")
        server = f"https://{HOST_IP}:{APISERVER_PORT}" if on_node else APISERVER_URL
        target.write_text(kubeconfig(layout.pki, client, server))
    layout.kubeconfig.write_text(kubeconfig(layout.pki, "admin", APISERVER_URL))


def start_control_plane(layout: Layout, state: State, minor: str = DEFAULT_KUBERNETES) -> None:
    """etcd and the control plane of Kubernetes ``minor`` (its own etcd: a newer etcd's data
    is not for an older one, so a switch starts from a fresh cluster, see ``ground.up``)."""
    k8s = layout.control_plane_bin(minor)
    state.data[KUBERNETES_KEY] = minor
    state.save()
    kc = layout.local / "kubeconfigs"
    pki = layout.pki
    start_daemon(
        state,
        "etcd",
        [
            str(k8s / "etcd"),
            "--name=default",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls=http://127.0.0.1:{ETCD_PORT}",
            f"--advertise-client-urls=http://127.0.0.1:{ETCD_PORT}",
            f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
            f"--initial-cluster=default=http://127.0.0.1:{ETCD_PEER_PORT}",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            # A throw-away cluster on a 2-core VM: durability is not worth the fsync latency.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        log_dir=layout.logs,
    )
    start_daemon(
        state,
        "kube-apiserver",
        [
            str(k8s / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            "--bind-address=0.0.0.0",
            f"--secure-port={APISERVER_PORT}",
            f"--advertise-address={HOST_IP}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_SUBNET}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *GANG_APISERVER_FLAGS.get(minor, ()),
        ],
        log_dir=layout.logs,
    )
    wait_until(
        "kube-apiserver /readyz",
        lambda: _https_ok(layout, APISERVER_URL + "/readyz"),
        timeout_s=90,
        log_path=layout.logs / "kube-apiserver.log",
    )
    start_daemon(
        state,
        "kube-controller-manager",
        [
            str(k8s / "kube-controller-manager"),
            f"--kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={SERVICE_SUBNET}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--profiling=false",
            "--v=1",
            *GENERIC_WORKLOAD_FLAGS.get(minor, ()),
        ],
        log_dir=layout.logs,
    )
    start_daemon(
        state,
        "kube-scheduler",
        [
            str(k8s / "kube-scheduler"),
            f"--kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--profiling=false",
            "--v=1",
            *SCHEDULER_API_RATE_FLAGS,
            *GENERIC_WORKLOAD_FLAGS.get(minor, ()),
        ],
        log_dir=layout.logs,
    )


def _containerd_config(layout: Layout, pause_reference: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"
[grpc]
  address = "{layout.containerd_socket}"
[ttrpc]
  address = "{layout.containerd_state}/containerd.sock.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.containerd_root}/opt"
[{cri}]
  sandbox_image = "{pause_reference}"
  # The VM refuses negative oom_score_adj; clamp instead of failing every container.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{layout.cni_conf_dir}"
"""


def _kubelet_config(layout: Layout) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "tlsCertFile": str(layout.pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(layout.pki / "kubelet-serving.key"),
        "address": HOST_IP,
        "healthzBindAddress": "127.0.0.1",
        "failSwapOn": False,
        "failCgroupV1": False,
        # The VM lacks CAP_SYS_RESOURCE: negative OOM scores are refused.
        "oomScoreAdj": 0,
        # No registry can give an image back, so never garbage-collect images.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "resolvConf": "",
        # CoreDNS on the host: pods find each other by node name (the bridge's headless Service).
        "clusterDNS": [HOST_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "maxPods": 60,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
    }
    return json.dumps(config, indent=2)


def _corefile(layout: Layout) -> str:
    kubeconfig_path = layout.local / "kubeconfigs" / "admin.kubeconfig"
    # Nothing outside the cluster domain is answered: there is no upstream to forward to.
    return (
        f"{CLUSTER_DOMAIN}:53 {{\n"
        f"    bind {HOST_IP}\n"
        "    errors\n"
        f"    kubernetes {CLUSTER_DOMAIN} {{\n"
        f"        kubeconfig {kubeconfig_path}\n"
        "    }\n"
        "}\n"
    )


def _dns_answers() -> bool:
    with socket.create_connection((HOST_IP, 53), timeout=1):
        return True


def start_coredns(layout: Layout, state: State) -> None:
    """The cluster's DNS on the pod bridge's address (the kubelet's clusterDNS)."""
    if not layout.coredns_bin.exists():
        raise ProvingGroundError(f"{layout.coredns_bin} missing: run dev/build-kubernetes.sh")
    corefile = layout.local / "coredns" / "Corefile"
    corefile.parent.mkdir(parents=True, exist_ok=True)
    corefile.write_text(_corefile(layout))
    start_daemon(
        state,
        "coredns",
        [str(layout.coredns_bin), "-conf", str(corefile)],
        log_dir=layout.logs,
        cwd=corefile.parent,
    )
    wait_until("coredns", _dns_answers, timeout_s=30, log_path=layout.logs / "coredns.log")


def start_real_node(layout: Layout, state: State, series: str) -> None:
    """containerd + kubelet; images (slurmd of Slurm ``series``) are imported before the kubelet
    starts."""
    layout.containerd_state.mkdir(parents=True, exist_ok=True)
    archives = images.ensure_archives(layout, series)
    pause = next(ref for ref in archives if ref.startswith(images.PAUSE_IMAGE))
    config = layout.local / "containerd.toml"
    config.write_text(_containerd_config(layout, pause))
    start_daemon(state, "containerd", ["containerd", "--config", str(config)], log_dir=layout.logs)
    ctr = ["ctr", "--address", str(layout.containerd_socket)]
    wait_until(
        "containerd",
        lambda: run([*ctr, "version"], check=False).returncode == 0,
        timeout_s=30,
        log_path=layout.logs / "containerd.log",
    )
    images.import_images(layout, ctr, series)
    bridge_image.import_bridge_image(layout, ctr)
    kubelet_config = layout.local / "kubelet.json"
    kubelet_config.write_text(_kubelet_config(layout))
    layout.kubelet_root.mkdir(parents=True, exist_ok=True)
    state.data["kubelet_started"] = True
    start_daemon(
        state,
        "kubelet",
        [
            str(layout.kubelet_bin / "kubelet"),
            f"--config={kubelet_config}",
            f"--kubeconfig={layout.local / 'kubeconfigs' / 'kubelet.kubeconfig'}",
            f"--hostname-override={REAL_NODE}",
            f"--node-ip={HOST_IP}",
            f"--root-dir={layout.kubelet_root}",
            "--node-labels=slurm-k8s-bridge.io/node-kind=real",
            "--v=1",
        ],
        log_dir=layout.logs,
    )


def start_kube_proxy(layout: Layout, state: State) -> None:
    """Services for the in-cluster overlay: iptables mode, pod traffic not masqueraded (slurmctld
    must see a registering slurmd's own address)."""
    # Pod-to-service-to-pod on one bridge needs bridged packets to pass iptables.
    Path("/proc/sys/net/bridge/bridge-nf-call-iptables").write_text("1\n")
    start_daemon(
        state,
        "kube-proxy",
        [
            str(layout.kubelet_bin / "kube-proxy"),
            f"--kubeconfig={layout.local / 'kubeconfigs' / 'kube-proxy.kubeconfig'}",
            f"--hostname-override={REAL_NODE}",
            "--proxy-mode=iptables",
            f"--cluster-cidr={POD_SUBNET}",
            "--conntrack-max-per-core=0",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
            "--v=1",
        ],
        log_dir=layout.logs,
    )


def _node_ready(layout: Layout, node: str) -> bool:
    out = kubectl(
        layout,
        "get",
        "node",
        node,
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        check=False,
    )
    return out.strip() == "True"


def wait_real_node(layout: Layout) -> None:
    wait_until(
        f"node {REAL_NODE} Ready",
        lambda: _node_ready(layout, REAL_NODE),
        timeout_s=120,
        log_path=layout.logs / "kubelet.log",
    )


def kwok_node_manifest(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                KWOK_LABEL[0]: KWOK_LABEL[1],
                "kubernetes.io/hostname": name,
                "kubernetes.io/role": "agent",
                "slurm-k8s-bridge.io/node-kind": "kwok",
            },
        },
        "spec": {
            "taints": [{"key": KWOK_TAINT[0], "value": KWOK_TAINT[1], "effect": "NoSchedule"}]
        },
        "status": {
            "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "1000"},
            "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "1000"},
        },
    }


def start_kwok(layout: Layout, state: State) -> None:
    if not layout.kwok_bin.exists():
        raise ProvingGroundError(f"{layout.kwok_bin} missing: run dev/build-kubernetes.sh")
    manifests = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [kwok_node_manifest(n) for n in KWOK_NODES],
    }
    kubectl(layout, "apply", "-f", "-", input_text=json.dumps(manifests))
    start_daemon(
        state,
        "kwok",
        [
            str(layout.kwok_bin),
            f"--kubeconfig={layout.local / 'kubeconfigs' / 'kwok.kubeconfig'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.215.0.0/16",
            "--node-ip=10.215.255.254",
            "--node-lease-duration-seconds=40",
            # Its pod stages without the one write no kubelet makes (see the file).
            f"--config={KWOK_POD_STAGES}",
        ],
        log_dir=layout.logs,
    )
    wait_until(
        "kwok nodes Ready",
        lambda: _node_ready(layout, KWOK_NODES[-1]),
        timeout_s=60,
        log_path=layout.logs / "kwok.log",
    )
