"""Bring the whole proving ground up, take it down, and say what runs."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from . import backup_host, bridge_daemon, kube, network, pki, slurm, slurm_series
from .layout import (
    BACKUP_HOST,
    BACKUP_IP,
    BRIDGE_NAME,
    GROUND_RUN,
    HOST_IP,
    KUBELET_VERSION,
    KUBERNETES_VERSIONS,
    KWOK_NODES,
    MUNGE_SOCKET,
    NAMESPACE,
    REAL_NODE,
    Layout,
)
from .processes import ProvingGroundError, State, run, stop_daemon

log = logging.getLogger(__name__)

#: The bridge unit's RuntimeDirectory (its socket).
BRIDGE_SOCKET_DIR = "/run/slurm-k8s-bridge"

#: Start order; ``down`` stops in reverse.
DAEMONS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "coredns",
    "containerd",
    "kubelet",
    "kube-proxy",
    "kwok",
    "munged",
    "mariadb",
    "slurmdbd",
    "slurmctld",
    "slurmd-static",
    "bridge",
)
REQUIRED_COMMANDS = (
    "go",
    "containerd",
    "ctr",
    "runc",
    "debootstrap",
    "openssl",
    "ip",
    "tar",
    "/usr/sbin/slurmctld",
    "/usr/sbin/munged",
    "/usr/bin/sinfo",
    "/usr/sbin/slurmdbd",
    "/usr/sbin/mariadbd",
    "/usr/sbin/useradd",
)


class Step:
    """A progress line per long step, with its duration."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.started = 0.0

    def __enter__(self) -> Step:
        self.started = time.monotonic()
        print(f"==> {self.what} ...", flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            print(f"    {self.what}: done in {time.monotonic() - self.started:.1f}s", flush=True)


def check_prerequisites() -> None:
    missing = [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]
    if missing:
        raise ProvingGroundError(
            "missing commands: " + ", ".join(missing) + " (run `make deps` as root: it installs "
            "Debian's slurmctld slurmd slurm-client slurmdbd munge mariadb-server-core containerd "
            "runc containernetworking-plugins debootstrap iproute2 openssl)"
        )
    if os.geteuid() != 0:
        raise ProvingGroundError("the proving ground runs containerd and a kubelet: run it as root")


def build_binaries(layout: Layout, kubernetes: str) -> None:
    """Kubernetes ``kubernetes``'s control plane and the real node's kubelet, kwok and the tools
    (cached: a second run builds nothing)."""
    script = layout.root / "dev" / "build-kubernetes.sh"
    versions = sorted({KUBERNETES_VERSIONS[kubernetes], KUBELET_VERSION})
    env = {
        **os.environ,
        "SKB_CACHE_DIR": str(layout.cache),
        "KUBERNETES_VERSIONS": " ".join(versions),
    }
    # Streams the build's own progress lines; a cached run prints one line.
    subprocess.run([str(script)], check=True, env=env)


def _netns() -> set[str]:
    root = Path("/run/netns")
    return {p.name for p in root.glob("cni-*")} if root.exists() else set()


def _write_env_file(layout: Layout, series: str) -> None:
    layout.bin.mkdir(parents=True, exist_ok=True)
    for name in ("kubectl",):
        link = layout.bin / name
        if link.is_symlink() and link.readlink() != layout.kubernetes_bin / name:
            link.unlink()  # a kubectl of an earlier default Kubernetes
        if not link.exists():
            link.symlink_to(layout.kubernetes_bin / name)
    for name, target in (
        ("kwok", layout.kwok_bin),
        ("kustomize", layout.kustomize_bin),
        ("crictl", layout.crictl_bin),
    ):
        link = layout.bin / name
        if not link.exists() and target.exists():
            link.symlink_to(target)
    # Slurm of another series: its clients (wrappers into its root) before the host's.
    slurm_path = "" if series == slurm_series.HOST_SERIES else f":{layout.slurm / 'bin'}"
    (layout.local / "env").write_text(
        f"# source me: the proving ground's Slurm and Kubernetes for this shell\n"
        f"export SLURM_CONF={layout.slurm_conf}\n"
        f"export KUBECONFIG={layout.kubeconfig}\n"
        f"export PATH={layout.bin}:{layout.root / '.venv' / 'bin'}{slurm_path}:$PATH\n"
    )


def _daemons(state: State) -> tuple[str, ...]:
    """What runs: with two controllers, the backup host's daemons too."""
    return DAEMONS + (backup_host.BACKUP_DAEMONS if backup_host.running_ha(state) else ())


def healthy(layout: Layout) -> bool:
    """Every daemon we start is running (so a test session can reuse it)."""
    state = State(layout)
    return all(state.running(name) is not None for name in _daemons(state))


def _leave_series(layout: Layout, state: State, series: str, auth: str) -> None:
    """Before Slurm ``series`` with ``auth`` replaces the running one: stop the bridge and
    slurmctld and delete the slurmd pods (of the old series or authentication, which the new
    slurmctld would refuse)."""
    old = f"{slurm.running_series(layout)}/{slurm.running_auth(layout)}"
    new = f"{series}/{auth}"
    with Step(f"switching Slurm {old} -> {new}: bridge, slurmctld and slurmd pods stop"):
        stop_daemon(state, "bridge")
        stop_daemon(state, "slurmd-static")
        stop_daemon(state, "slurmctld")
        if state.running("kube-apiserver"):
            from bridge.domain.pods import LABEL_MANAGED_BY, MANAGED_BY  # noqa: PLC0415

            kube.kubectl(
                layout, "-n", NAMESPACE, "delete", "pods", "-l", f"{LABEL_MANAGED_BY}={MANAGED_BY}",
                "--grace-period=2", "--wait=true", "--timeout=90s", check=False, timeout_s=120,
            )  # fmt: skip


def _check_ha(auth: str) -> None:
    if auth != slurm_series.AUTH_MUNGE:
        raise ProvingGroundError(
            f"HA=1 (a backup controller) runs with munge only, not {auth}: auth/slurm's sack "
            "socket, in the Slurm root's /run, would be shared by both controllers here"
        )


def up(
    layout: Layout,
    series: str | None = None,
    auth: str | None = None,
    ha: bool | None = None,
    kubernetes: str | None = None,
) -> None:
    """Start what is not running (idempotent) with Slurm ``series`` (default: ``SKB_SLURM``,
    else the default series) and ``auth`` (default: ``SKB_AUTH``, else munge), with ``ha``
    a backup controller host (default: ``SKB_HA=1``, else one controller), and the control plane
    of Kubernetes ``kubernetes`` (default: ``SKB_K8S``, else the newest); a ground of another
    series, authentication or controller count switches its Slurm side and bridges, one of
    another Kubernetes starts again from a fresh cluster."""
    started = time.monotonic()
    kubernetes = kubernetes or kube.kubernetes_from_env()
    series = series or slurm_series.series_from_env()
    auth = auth or slurm_series.auth_from_env()
    ha = backup_host.wanted_from_env() if ha is None else ha
    slurm_series.check_auth(series, auth)
    if ha:
        _check_ha(auth)
    check_prerequisites()
    layout.local.mkdir(parents=True, exist_ok=True)
    state = State(layout)
    if slurm.switching_series(state, series, auth) and state.running("slurmctld"):
        _leave_series(layout, state, series, auth)
    if backup_host.running_ha(state) != ha:
        # The bridges' configurations differ (leader election, TLS, both controllers).
        for name in (*backup_host.BACKUP_DAEMONS, "bridge"):
            stop_daemon(state, name)
    state = _fresh_cluster_if_needed(layout, state, kubernetes)
    if "netns_before" not in state.data:
        state.data["netns_before"] = sorted(_netns())
        state.save()
    with Step(f"Kubernetes binaries (cache: {layout.cache})"):
        build_binaries(layout, kubernetes)
    with Step("certificates and kubeconfigs"):
        pki.ensure_pki(layout.pki)
        kube.write_kubeconfigs(layout)
        _write_env_file(layout, series)
    with Step(f"pod network (bridge {HOST_IP})"):
        network.ensure_bridge(state)
        network.write_cni_config(layout.cni_conf_dir, layout.cni_ipam_dir)
    _backup_host(layout, state, ha)
    with Step(
        f"control plane {KUBERNETES_VERSIONS[kubernetes]}: etcd, kube-apiserver, "
        "controller-manager, scheduler"
    ):
        kube.start_control_plane(layout, state, kubernetes)
    with Step(f"cluster DNS: coredns on {HOST_IP}:53"):
        kube.start_coredns(layout, state)
    with Step(f"real node {REAL_NODE}: images, containerd, kubelet"):
        kube.start_real_node(layout, state, series)
        kube.start_kube_proxy(layout, state)
    with Step(f"simulated nodes: kwok x{len(KWOK_NODES)}"):
        kube.start_kwok(layout, state)
    controllers = "slurmctld and its backup" if ha else "slurmctld"
    with Step(f"Slurm {series} ({auth}): munged, mariadb, slurmdbd, {controllers}, slurmd"):
        slurm.start_slurm(layout, state, series, auth, ha)
    with Step("waiting for the real node to be Ready"):
        kube.wait_real_node(layout)
    _start_bridges(layout, state, ha)
    print(summary(layout))
    print(f"proving ground up in {time.monotonic() - started:.1f}s")


def _fresh_cluster_if_needed(layout: Layout, state: State, kubernetes: str) -> State:
    """The ground goes down first when its cluster cannot go on: the control plane of
    ``kubernetes`` replaces another one (a newer etcd's and API server's data is not for an
    older one), or the CA is replaced (every daemon holds certificates of the old one)."""
    if not state.running("kube-apiserver"):
        return state
    running = kube.running_kubernetes(state)
    if running != kubernetes:
        log.warning("Kubernetes %s runs, %s wanted: stopping the ground first", running, kubernetes)
    elif pki.ca_outdated(layout.pki):
        log.warning("the cluster CA is replaced (no keyUsage): stopping the ground first")
    else:
        return state
    down(layout)
    return State(layout)


def _backup_host(layout: Layout, state: State, ha: bool) -> None:
    """The backup controller host made with ``ha``, else removed if there is one."""
    if ha:
        with Step(f"backup controller host {BACKUP_HOST} ({BACKUP_IP})"):
            backup_host.ensure_host(layout, state)
    elif backup_host.running_ha(state) or BACKUP_HOST in state.created("netns"):
        with Step(f"removing the backup controller host {BACKUP_HOST}"):
            backup_host.remove_host(state)


def _start_bridges(layout: Layout, state: State, ha: bool) -> None:
    """The bridge; with ``ha`` one on each controller host, electing a leader."""
    with Step("the bridge: ServiceAccount, RBAC, key Secrets, slurm-k8s-bridge serve"):
        bridge_daemon.ensure_credentials(layout)
        if not ha:
            bridge_daemon.start_bridge(layout, state)
            return
        configs = backup_host.write_bridge_configs(layout, _bridge_yaml(layout))
        bridge_daemon.start_bridge(layout, state, configs[backup_host.primary_host()])
    with Step("the backup host's bridge (leader election on a Lease, forwarding over TLS)"):
        backup_host.start_bridge(layout, state, configs[BACKUP_HOST])
        state.data[backup_host.MODE_KEY] = 2
        state.save()


def _bridge_yaml(layout: Layout) -> dict[str, Any]:
    data = yaml.safe_load(slurm.bridge_config_path(layout).read_text())
    if not isinstance(data, dict):
        raise ProvingGroundError(f"{slurm.bridge_config_path(layout)}: not a mapping")
    return data


def summary(layout: Layout) -> str:
    state = State(layout)
    rows = []
    for name in _daemons(state):
        pid = state.running(name)
        entry = state.processes.get(name, {})
        rows.append(
            f"  {name:24} {'pid ' + str(pid) if pid else 'not running':12} {entry.get('log', '')}"
        )
    return "\n".join(
        [
            "Proving ground:",
            *rows,
            f"  kubeconfig:  {layout.kubeconfig}",
            f"  kubectl:     {layout.bin / 'kubectl'}",
            f"  kubernetes:  {_kubernetes_line(state)}",
            f"  slurm:       {_series_line(layout)}",
            f"  auth:        {_auth_line(layout)}",
            f"  slurm.conf:  {layout.slurm_conf}",
            f"  logs:        {layout.logs}",
            f"  bridge:      {bridge_daemon.BRIDGE_SOCKET} (log {layout.logs / 'bridge.log'})",
            f"  metrics:     {bridge_daemon.metrics_url(layout)}",
            f"  try:         source {layout.local / 'env'}; sinfo; kubectl get nodes",
        ]
    )


def _kubernetes_line(state: State) -> str:
    minor = kube.running_kubernetes(state)
    gang = "gang scheduling on" if minor in kube.GANG_APISERVER_FLAGS else "no gang scheduling"
    return f"control plane {KUBERNETES_VERSIONS[minor]} ({gang}), kubelet {KUBELET_VERSION}"


def _series_line(layout: Layout) -> str:
    series = slurm.running_series(layout)
    programs = slurm.ground_programs(layout)
    where = (
        "the host's" if programs.on_host else f"from {slurm_series.rootfs(layout.cache, series)}"
    )
    return f"{series} ({where}; clients in {programs.bin_dir})"


def _auth_line(layout: Layout) -> str:
    if slurm.running_auth(layout) == slurm_series.AUTH_SLURM:
        return (
            f"auth/slurm (key {slurm.slurm_key_path(layout)}, Secret "
            f"{NAMESPACE}/{bridge_daemon.SLURM_KEY_SECRET}; munged runs unused)"
        )
    secret = f"{NAMESPACE}/{bridge_daemon.MUNGE_KEY_SECRET}"
    return f"auth/munge (munged on {MUNGE_SOCKET}, Secret {secret})"


def status(layout: Layout) -> int:
    print(summary(layout))
    state = State(layout)
    if state.running("kube-apiserver"):
        print(kube.kubectl(layout, "get", "nodes", "-o", "wide", check=False))
    if state.running("slurmctld"):
        sinfo = slurm.ground_programs(layout).client("sinfo")
        print(run([sinfo, "-V"], env=slurm.slurm_env(layout), check=False).stdout.strip())
        print(run([sinfo], env=slurm.slurm_env(layout), check=False).stdout)
    return 0 if healthy(layout) else 1


def _kill_our_shims(layout: Layout) -> None:
    """containerd's shims outlive containerd; ours name our socket in their argv."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"containerd-shim-runc-v2")
            and str(layout.containerd_socket).encode() in b" ".join(argv)
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), 9)


def down(layout: Layout) -> None:
    state = State(layout)
    started = time.monotonic()
    if state.running("kube-apiserver") and state.running("kubelet"):
        with Step("deleting every pod (the kubelet stops their containers)"):
            kube.kubectl(
                layout,
                "delete",
                "pods",
                "--all",
                "--all-namespaces",
                "--grace-period=2",
                "--wait=true",
                "--timeout=90s",
                check=False,
                timeout_s=120,
            )
    if state.running("containerd") and layout.crictl_bin.exists():
        with Step("removing pod sandboxes left in containerd"):
            endpoint = f"unix://{layout.containerd_socket}"
            run(
                [str(layout.crictl_bin), "--runtime-endpoint", endpoint, "rmp", "-fa"],
                check=False,
                timeout_s=120,
            )
    with Step("stopping daemons (by recorded PID)"):
        backup_host.remove_host(state)  # its daemons, netns and directories
        for name in reversed(DAEMONS):
            stop_daemon(state, name)
        _kill_our_shims(layout)
        slurm.remove_static_cgroups()
        if (layout.kubelet_bin / "kube-proxy").exists():
            # Removes the KUBE-* iptables chains kube-proxy made.
            run([str(layout.kubelet_bin / "kube-proxy"), "--cleanup"], check=False)
        if state.data.get("kubelet_started"):
            network.remove_kube_chains()
            state.data.pop("kubelet_started", None)
    with Step("unmounting, removing network namespaces and the bridge"):
        points = network.unmount_all(
            layout.kubelet_root,
            layout.containerd_state,
            layout.containerd_root,
            Path(BRIDGE_SOCKET_DIR),
            Path(GROUND_RUN),  # the Slurm roots' binds
        )
        if points:
            log.info("unmounted %d mount points", len(points))
        before = set(state.data.get("netns_before", []))
        for name in sorted(_netns() - before):
            run(["ip", "netns", "delete", name], check=False)
        network.remove_bridge(state)
        slurm.remove_hosts_entries()
        shutil.rmtree(BRIDGE_SOCKET_DIR, ignore_errors=True)
        if not network.mounts_under(Path(GROUND_RUN)):  # never delete through a bind
            shutil.rmtree(GROUND_RUN, ignore_errors=True)
        shutil.rmtree(bridge_daemon.SHARED_DIR.parent, ignore_errors=True)
        (layout.root / "slurm_plugins" / "hooks.env").unlink(missing_ok=True)
        # Fresh cluster and Slurm state next time; certificates and the cache stay.
        for path in (
            layout.etcd_data,
            layout.slurm / "state",
            layout.kubelet_root,
            layout.cni_ipam_dir,
        ):
            shutil.rmtree(path, ignore_errors=True)
    state.data.pop("netns_before", None)
    state.save()
    print(f"proving ground down in {time.monotonic() - started:.1f}s")


def leftovers(layout: Layout) -> dict[str, list[str]]:
    """What of ours still exists (used by tests of `down`)."""
    state = State(layout)
    before = set(state.data.get("netns_before", []))
    return {
        "processes": [n for n in DAEMONS + backup_host.BACKUP_DAEMONS if state.running(n)],
        "mounts": network.mounts_under(
            layout.kubelet_root, layout.containerd_state, layout.containerd_root, Path(GROUND_RUN)
        ),
        "interfaces": [BRIDGE_NAME] if network.bridge_exists() else [],
        "netns": sorted(_netns() - before)
        + [name for name in (BACKUP_HOST,) if Path("/run/netns", name).exists()],
        "iptables": network.kube_chains(),
    }
