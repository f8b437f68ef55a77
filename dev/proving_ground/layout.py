"""Where everything lives and which versions and addresses the proving ground uses."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: The control planes the ground runs (``make up K8S=1.34`` sets ``SKB_K8S``): minor -> release.
#: The newest is the default; 1.34 stays in the matrix (tests/e2e/test_zz_down_and_up.py).
KUBERNETES_VERSIONS = {"1.37": "v1.37.2", "1.34": "v1.34.4"}
DEFAULT_KUBERNETES = "1.37"
KUBERNETES_VERSION = KUBERNETES_VERSIONS[DEFAULT_KUBERNETES]
#: The real node's kubelet and kube-proxy, whatever the control plane: kubelets from 1.35 on
#: refuse a cgroup v1 host (this VM's), and Debian's containerd 1.6 is older than newer kubelets
#: accept. Kubernetes' version-skew policy lets a kubelet be three minors older than the API
#: server, so 1.34 serves a 1.37 control plane.
KUBELET_VERSION = "v1.34.4"
KWOK_VERSION = "v0.7.0"
KUSTOMIZE_VERSION = "v5.7.1"
CRICTL_VERSION = "v1.34.0"
COREDNS_VERSION = "v1.15.0"

#: The bridge the real node's pods sit on; the host is the gateway, slurmctld listens there.
BRIDGE_NAME = "skb0"
POD_SUBNET = "10.213.0.0/24"
HOST_IP = "10.213.0.1"
SERVICE_SUBNET = "10.214.0.0/24"
KUBERNETES_SERVICE_IP = "10.214.0.1"

ETCD_PORT = 2379
ETCD_PEER_PORT = 2380
APISERVER_PORT = 6443
SLURMCTLD_PORT = 6817
REAL_NODE = "skb-real-0"
KWOK_NODES = tuple(f"skb-kwok-{i}" for i in range(10))
NAMESPACE = "slurm"
#: The ground's run-time directory (munged's socket, MariaDB's socket, the Slurm roots' mount
#: points), 0755: every user must reach munged, job users too. Not /run/slurm-k8s-bridge: that is
#: the bridge unit's RuntimeDirectory, 0750 and group SlurmUser's.
GROUND_RUN = "/run/skb-ground"
#: A munge socket of our own, so that a site's munged (if any) is never touched.
MUNGE_SOCKET = f"{GROUND_RUN}/munge/munge.socket.2"
#: The site layout's users (created by `make up` when missing, kept by `make down`, like the
#: packages): slurmctld and slurmdbd drop to SLURM_USER (Debian's packages create it, uid 64030);
#: the bridge runs as BRIDGE_USER (deploy/systemd/sysusers.d: primary group SLURM_USER's);
#: JOB_USER exists only on this host, submits jobs, and is resolved in the pods by nss_slurm.
SLURM_USER = "slurm"
BRIDGE_USER = "slurm-k8s-bridge"
JOB_USER = "skb-alice"
SLURMDBD_PORT = 6819
#: MariaDB of our own for slurmdbd, on loopback only (not 3306: a site's own database may be).
MARIADB_PORT = 3317
#: Two controllers (``make up HA=1``, :mod:`.backup_host`): the backup host's name (and network
#: namespace) and address on the pod bridge, below the pods' range (.10-.250).
BACKUP_HOST = "skb-ctl-b"
BACKUP_IP = "10.213.0.2"
#: How long the backup slurmctld waits for a silent primary before it takes over (Slurm's
#: default, 120 s, is a site's; short here so that a test sees the takeover).
BACKUP_SLURMCTLD_TIMEOUT_S = 10
#: What each controller host keeps of its own (the backup host binds its copy over it, and a
#: Slurm root binds the caller's): with two controllers, SlurmctldPidFile's directory (in the
#: shared StateSaveLocation each slurmctld would find the other's PID, and signals the PID it
#: finds there at its start).
HOST_LOCAL_RUN = "/run/skb-host"
HA_PID_DIR = f"{HOST_LOCAL_RUN}/slurmctld"
#: The cluster's DNS domain; CoreDNS serves it on HOST_IP for the real node's pods.
CLUSTER_DOMAIN = "cluster.local"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    explicit = os.environ.get("SKB_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slurm-k8s-bridge"


@dataclass(frozen=True)
class Layout:
    """Paths of one proving ground (one repository checkout)."""

    root: Path
    cache: Path

    @classmethod
    def default(cls) -> Layout:
        return cls(root=repo_root(), cache=cache_dir())

    @property
    def local(self) -> Path:
        return self.root / ".local"

    @property
    def state_file(self) -> Path:
        return self.local / "state.json"

    @property
    def logs(self) -> Path:
        return self.local / "logs"

    @property
    def pki(self) -> Path:
        return self.local / "pki"

    @property
    def bin(self) -> Path:
        return self.local / "bin"

    @property
    def kubeconfig(self) -> Path:
        return self.local / "kubeconfig"

    @property
    def kubernetes_bin(self) -> Path:
        """The default control plane's binaries (kubectl comes from here, whichever runs)."""
        return self.cache / f"kubernetes-{KUBERNETES_VERSION}"

    def control_plane_bin(self, minor: str) -> Path:
        """etcd, kube-apiserver, controller-manager and scheduler of Kubernetes ``minor``."""
        return self.cache / f"kubernetes-{KUBERNETES_VERSIONS[minor]}"

    @property
    def kubelet_bin(self) -> Path:
        """The real node's kubelet and kube-proxy (see :data:`KUBELET_VERSION`)."""
        return self.cache / f"kubernetes-{KUBELET_VERSION}"

    @property
    def kwok_bin(self) -> Path:
        return self.cache / f"kwok-{KWOK_VERSION}" / "kwok"

    @property
    def kustomize_bin(self) -> Path:
        return self.cache / f"kustomize-{KUSTOMIZE_VERSION}" / "kustomize"

    @property
    def crictl_bin(self) -> Path:
        return self.cache / f"crictl-{CRICTL_VERSION}" / "crictl"

    @property
    def coredns_bin(self) -> Path:
        return self.cache / f"coredns-{COREDNS_VERSION}" / "coredns"

    @property
    def etcd_data(self) -> Path:
        return self.local / "etcd"

    @property
    def containerd_root(self) -> Path:
        # Kept in the cache: imported images survive `make down`, so the next `up` is warm.
        return self.cache / "containerd"

    @property
    def containerd_state(self) -> Path:
        return Path(GROUND_RUN) / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.local / "kubelet"

    @property
    def cni_conf_dir(self) -> Path:
        return self.local / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.local / "cni" / "ipam"

    @property
    def slurm(self) -> Path:
        return self.local / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm / "slurm.conf"

    @property
    def munge_key(self) -> Path:
        return self.local / "munge" / "munge.key"

    @property
    def images(self) -> Path:
        return self.cache / "images"
