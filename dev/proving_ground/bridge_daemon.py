"""The bridge itself on the proving ground: its ServiceAccount credentials, the hooks' settings,
and ``slurm-k8s-bridge serve`` next to slurmctld, as a site runs it: the wheel of this checkout
in a venv of its own (:mod:`.bridge_install`), started from the shipped systemd unit by
:mod:`.unit_runner` (its User=, Group=, RuntimeDirectory=, hardening it can apply), so as the
bridge's own non-root user with the Slurm rights the guide grants (:mod:`.accounting`)."""

from __future__ import annotations

import base64
import os
import pwd
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from . import bridge_install, kube
from .layout import APISERVER_PORT, BRIDGE_USER, NAMESPACE, Layout
from .processes import ProvingGroundError, State, start_daemon, stop_daemon, wait_until
from .slurm import bridge_config_path, ground_programs, running_auth, slurm_key_path
from .slurm_series import AUTH_SLURM

BRIDGE_SOCKET = "/run/slurm-k8s-bridge/bridge.sock"
SHARED_DIR = Path("/var/lib/slurm-k8s-bridge/shared")
#: The ground's state records the sources digest of the install the running bridge started from.
_INSTALL_KEY = "bridge_sources"
SERVICE_ACCOUNT = "slurm-k8s-bridge"
#: What every bridge configuration here names (slurm.munge_key_secret).
MUNGE_KEY_SECRET = "slurm-munge-key"  # noqa: S105 (a name)
#: The auth/slurm key's Secret (slurm.slurm_key_secret's default), made when the ground runs it.
SLURM_KEY_SECRET = "slurm-key"  # noqa: S105 (a name)


def bridge_kubeconfig(layout: Layout) -> Path:
    return layout.local / "kubeconfigs" / "bridge.kubeconfig"


def ensure_credentials(layout: Layout) -> None:
    """The bridge's namespace and admission guard, the munge Secret, the kustomize base
    (ServiceAccount, Role, node Service), and a kubeconfig holding a token of the bridge's
    ServiceAccount: the bridge runs with exactly that RBAC."""
    kustomize = layout.root / "deploy" / "kustomize"
    # As a site does it: the administrator's part first, then the Secret by name (the base
    # holds no key), then the base.
    ground_namespace = layout.root / "dev" / "proving_ground" / "namespace"
    kube.kubectl(layout, "apply", "-k", str(ground_namespace))
    create_munge_secret(layout, NAMESPACE, layout.munge_key)
    if running_auth(layout) == AUTH_SLURM:
        create_slurm_key_secret(layout, NAMESPACE, slurm_key_path(layout))
    kube.kubectl(layout, "apply", "-k", str(kustomize / "base"))
    token = kube.kubectl(
        layout, "-n", NAMESPACE, "create", "token", SERVICE_ACCOUNT, "--duration=48h"
    ).strip()
    bridge_kubeconfig(layout).write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: proving-ground
  cluster:
    certificate-authority-data: {base64.b64encode((layout.pki / "ca.crt").read_bytes()).decode()}
    server: https://127.0.0.1:{APISERVER_PORT}
users:
- name: {SERVICE_ACCOUNT}
  user:
    token: {token}
contexts:
- name: bridge
  context: {{cluster: proving-ground, user: {SERVICE_ACCOUNT}, namespace: {NAMESPACE}}}
current-context: bridge
""")
    # As the guide's tmpfiles.d line has it: the bridge's user reads it, nobody else. The CA is
    # inside (the ground's PKI directory is root's), as the external overlay's
    # make-kubeconfig.sh writes it.
    entry = pwd.getpwnam(BRIDGE_USER)
    os.chown(bridge_kubeconfig(layout), entry.pw_uid, entry.pw_gid)
    bridge_kubeconfig(layout).chmod(0o400)
    # Pods name no ServiceAccount, so the API server admits them only once the controller
    # manager has made the namespace's "default" one: seen in CI, the first resume right after
    # `make up` was refused ("serviceaccount "default" not found") and its nodes set DOWN.
    wait_until(
        f"ServiceAccount default in namespace {NAMESPACE}",
        lambda: bool(
            kube.kubectl(
                layout, "-n", NAMESPACE, "get", "serviceaccount", "default",
                "--ignore-not-found", "-o", "name",
            ).strip()
        ),
        timeout_s=60,
        log_path=layout.logs / "kube-controller-manager.log",
    )  # fmt: skip


def create_munge_secret(layout: Layout, namespace: str, key: Path) -> None:
    """The Secret slurmd pods mount (``slurm.munge_key_secret``), from ``key``; replaced if it
    exists. Rendered client-side and piped, so the key never lands in a file of the checkout."""
    manifest = kube.kubectl(
        layout, "-n", namespace, "create", "secret", "generic", MUNGE_KEY_SECRET,
        f"--from-file=munge.key={key}", "--dry-run=client", "-o", "yaml",
    )  # fmt: skip
    kube.kubectl(layout, "apply", "-f", "-", input_text=manifest)


def create_slurm_key_secret(layout: Layout, namespace: str, key: Path) -> None:
    """The Secret slurmd pods mount with ``slurm.auth: slurm`` (``slurm.slurm_key_secret``),
    from slurmctld's ``key``; replaced if it exists, piped like the munge one."""
    manifest = kube.kubectl(
        layout, "-n", namespace, "create", "secret", "generic", SLURM_KEY_SECRET,
        f"--from-file=slurm.key={key}", "--dry-run=client", "-o", "yaml",
    )  # fmt: skip
    kube.kubectl(layout, "apply", "-f", "-", input_text=manifest)


def write_hooks_env(layout: Layout) -> None:
    (layout.root / "slurm_plugins" / "hooks.env").write_text(
        "# Written by the proving ground; see hooks.env.example.\n"
        f"SKB_PYTHON={bridge_install.venv_dir(layout) / 'bin' / 'python'}\n"
        f"SKB_SOCKET=unix:{BRIDGE_SOCKET}\n"
        "SKB_SLURM_BIN=/usr/bin\n"
        f"SKB_HOOK_LOG={layout.logs / 'hooks.log'}\n"
        # job_ready (PrologSlurmctld) gets no SLURM_CONF from slurmctld.
        f"SKB_SLURM_CONF={layout.slurm_conf}\n"
    )


def bridge_settings(layout: Layout) -> dict[str, str]:
    """The ``SKB_*`` settings the ground gives its bridge (they win over any file)."""
    return {
        "SKB_KUBERNETES_KUBECONFIG": str(bridge_kubeconfig(layout)),
        "SKB_SLURM_CONF": str(layout.slurm_conf),
        # The clients of the ground's series: the host's, or wrappers into its root.
        "SKB_SLURM_BIN_DIR": str(ground_programs(layout).bin_dir),
        "SKB_BRIDGE_SOCKET": BRIDGE_SOCKET,
        # The pods hold the key of the authentication slurmctld runs (slurm.auth).
        "SKB_SLURM_AUTH": running_auth(layout),
    }


def bridge_env(layout: Layout) -> dict[str, str]:
    """This process's environment with the bridge's settings (to run its CLI as root)."""
    return {**os.environ, **bridge_settings(layout)}


#: The unit that ships, and the paths in it the ground's install replaces.
UNIT_FILE = Path("deploy/systemd/slurm-k8s-bridge.service")
UNIT_VENV = "/opt/slurm-k8s-bridge/venv"
UNIT_CONFIG = "/etc/slurm-k8s-bridge/bridge.yaml"


def bridge_argv(
    layout: Layout, config: Path | None = None, env_overrides: Mapping[str, str] | None = None
) -> list[str]:
    """The unit runner on the shipped unit: the ground's venv and ``config`` in its Exec lines,
    the ground's settings (then ``env_overrides``) in its environment."""
    settings = {**bridge_settings(layout), **(env_overrides or {})}
    return [
        sys.executable, "-m", "proving_ground.unit_runner",
        "--unit", str(layout.root / UNIT_FILE),
        "--replace", f"{UNIT_VENV}={bridge_install.venv_dir(layout)}",
        "--replace", f"{UNIT_CONFIG}={config or bridge_config_path(layout)}",
        *(arg for key, value in settings.items() for arg in ("--setenv", f"{key}={value}")),
    ]  # fmt: skip


def _readable_by_bridge_user(path: Path) -> bool:
    """Whether the bridge's user can read ``path`` (every directory above it traversable)."""
    entry = pwd.getpwnam(BRIDGE_USER)
    groups = {entry.pw_gid, *os.getgrouplist(BRIDGE_USER, entry.pw_gid)}

    def allows(p: Path, bit: int) -> bool:
        st = p.stat()
        if st.st_uid == entry.pw_uid:
            return bool(st.st_mode & (bit << 6))
        if st.st_gid in groups:
            return bool(st.st_mode & (bit << 3))
        return bool(st.st_mode & bit)

    resolved = path.resolve()
    return all(allows(p, 1) for p in resolved.parents) and allows(resolved, 4)


def _socket_answers(path: str | Path = BRIDGE_SOCKET) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(1)
        s.connect(str(path))
    return True


def start_bridge(
    layout: Layout,
    state: State,
    config: Path | None = None,
    env_overrides: Mapping[str, str] | None = None,
    *,
    name: str = "bridge",
    launch: Callable[[list[str]], list[str]] | None = None,
) -> int:
    """Start the shipped unit's ``slurm-k8s-bridge serve`` as the bridge's user (with ``config``
    instead of dev/bridge.yaml; ``env_overrides`` win over the ground's ``SKB_*`` settings,
    which win over any file). ``config`` must be readable by that user: not under pytest's
    tmp_path (0700 root's), see tests.cluster.bridge_readable_dir. ``name`` and ``launch``
    (the argv that runs the unit's on another host) start a bridge of another host
    (:mod:`.backup_host`)."""
    chosen = config or bridge_config_path(layout)
    if not _readable_by_bridge_user(chosen):
        raise ProvingGroundError(
            f"{chosen}: not readable by {BRIDGE_USER}, the user the bridge runs as (put it "
            f"in a directory that user can reach, e.g. under {layout.local})"
        )
    SHARED_DIR.mkdir(parents=True, exist_ok=True)
    SHARED_DIR.chmod(0o1777)
    write_hooks_env(layout)
    bridge_install.ensure_installed(layout)
    installed = bridge_install.sources_digest(layout.root)
    key = _INSTALL_KEY if name == "bridge" else f"{_INSTALL_KEY}:{name}"
    if state.running(name) is not None and state.data.get(key) != installed:
        # `make up` on a running ground after a change: the running bridge is the old wheel's.
        print(f"    {name}: restarting it on the new install (sources {installed})", flush=True)
        stop_daemon(state, name)
    state.data[key] = installed
    state.save()
    argv = bridge_argv(layout, config, env_overrides)
    pid = start_daemon(
        state,
        name,
        launch(argv) if launch is not None else argv,
        log_dir=layout.logs,
        env={**os.environ, "PYTHONPATH": str(layout.root / "dev")},
        cwd=layout.root,
    )
    # Through the process's own mount namespace: another host's socket is its own. Only once
    # the unit's program runs (`serve`): until then, a launcher making that namespace sees
    # this host's socket (another bridge's) at the same path.
    where = Path(f"/proc/{pid}/root") / Path(BRIDGE_SOCKET).relative_to("/")

    def answers() -> bool:
        serving = b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return serving and _socket_answers(where)

    wait_until(
        f"{name} socket",
        answers,
        timeout_s=60,
        log_path=layout.logs / f"{name}.log",
    )
    return pid


def metrics_url(layout: Layout) -> str:
    """Where the ground's bridge serves Prometheus metrics (its bridge.metrics_address)."""
    from bridge.config import load_config  # noqa: PLC0415 (pydantic: only when asked)

    address = load_config(str(bridge_config_path(layout))).bridge.metrics_address
    return f"http://{address}/metrics" if address else "(off: bridge.metrics_address is empty)"
