"""The bridge itself on the proving ground: its ServiceAccount credentials, the hooks' settings,
and ``slurm-k8s-bridge serve`` next to slurmctld."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from . import kube
from .layout import APISERVER_PORT, NAMESPACE, Layout
from .processes import State, start_daemon, wait_until
from .slurm import bridge_config_path, ground_programs, running_auth, slurm_key_path
from .slurm_series import AUTH_SLURM

BRIDGE_SOCKET = "/run/slurm-k8s-bridge/bridge.sock"
SHARED_DIR = Path("/var/lib/slurm-k8s-bridge/shared")
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
    kube.kubectl(layout, "apply", "-k", str(kustomize / "namespace"))
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
    certificate-authority: {layout.pki / "ca.crt"}
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
    bridge_kubeconfig(layout).chmod(0o600)
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
        f"SKB_PYTHON={layout.root / '.venv' / 'bin' / 'python'}\n"
        f"SKB_SOCKET=unix:{BRIDGE_SOCKET}\n"
        "SKB_SLURM_BIN=/usr/bin\n"
        f"SKB_HOOK_LOG={layout.logs / 'hooks.log'}\n"
        # job_ready (PrologSlurmctld) gets no SLURM_CONF from slurmctld.
        f"SKB_SLURM_CONF={layout.slurm_conf}\n"
    )


def bridge_env(layout: Layout) -> dict[str, str]:
    return {
        **os.environ,
        "SKB_KUBERNETES_KUBECONFIG": str(bridge_kubeconfig(layout)),
        "SKB_SLURM_CONF": str(layout.slurm_conf),
        # The clients of the ground's series: the host's, or wrappers into its root.
        "SKB_SLURM_BIN_DIR": str(ground_programs(layout).bin_dir),
        "SKB_BRIDGE_SOCKET": BRIDGE_SOCKET,
        # The pods hold the key of the authentication slurmctld runs (slurm.auth).
        "SKB_SLURM_AUTH": running_auth(layout),
    }


def bridge_argv(layout: Layout, config: Path | None = None) -> list[str]:
    return [
        str(layout.root / ".venv" / "bin" / "slurm-k8s-bridge"),
        "serve",
        "--config",
        str(config or bridge_config_path(layout)),
    ]


def _socket_answers() -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(1)
        s.connect(BRIDGE_SOCKET)
    return True


def start_bridge(
    layout: Layout,
    state: State,
    config: Path | None = None,
    env_overrides: Mapping[str, str] | None = None,
) -> int:
    """Start ``slurm-k8s-bridge serve`` (with ``config`` instead of dev/bridge.yaml;
    ``env_overrides`` win over the ground's ``SKB_*`` settings, which win over any file)."""
    SHARED_DIR.mkdir(parents=True, exist_ok=True)
    SHARED_DIR.chmod(0o1777)
    write_hooks_env(layout)
    pid = start_daemon(
        state,
        "bridge",
        bridge_argv(layout, config),
        log_dir=layout.logs,
        env={**bridge_env(layout), **(env_overrides or {})},
    )
    wait_until("bridge socket", _socket_answers, timeout_s=30, log_path=layout.logs / "bridge.log")
    return pid


def metrics_url(layout: Layout) -> str:
    """Where the ground's bridge serves Prometheus metrics (its bridge.metrics_address)."""
    from bridge.config import load_config  # noqa: PLC0415 (pydantic: only when asked)

    address = load_config(str(bridge_config_path(layout))).bridge.metrics_address
    return f"http://{address}/metrics" if address else "(off: bridge.metrics_address is empty)"
