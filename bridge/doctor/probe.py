"""The doctor's facts: gathered from this host, its slurmctld (:class:`SlurmCli`) and Kubernetes
(:class:`PodGateway`), then judged by :mod:`bridge.doctor.checks`."""

from __future__ import annotations

import grp
import os
import pwd
import re
import socket
import stat
import sys
from pathlib import Path
from typing import Any

from bridge.adapters.kubernetes import PodGateway
from bridge.adapters.slurm.cli import SlurmCli, read_slurm_user
from bridge.doctor.checks import (
    CORDON_ACCESS,
    HOOK_KEYS,
    SLURMD_PORT,
    Check,
    Owner,
    SocketFacts,
    Status,
    check_cordon_access,
    check_hook_program,
    check_name,
    check_object,
    check_python,
    check_rbac,
    check_route,
    check_slurm,
    check_socket,
    hook_python,
    key_secret,
    missing_access,
    readable_names,
)
from bridge.errors import BackendError, BridgeError, Forbidden
from bridge.settings import BridgeConfig


def python_version(executable: str) -> tuple[int, int] | None:
    """The version of the Python at ``executable`` without running it: the name it resolves to
    (``python3.11``), else ``version`` in the venv's ``pyvenv.cfg``; None when neither says."""
    path = Path(executable)
    match = re.fullmatch(r"python(\d+)\.(\d+)", path.resolve().name)
    if match:
        return int(match[1]), int(match[2])
    try:
        cfg = (path.parent.parent / "pyvenv.cfg").read_text()
    except OSError:
        return None
    found = re.search(r"^version(?:_info)?\s*=\s*(\d+)\.(\d+)", cfg, re.MULTILINE)
    return (int(found[1]), int(found[2])) if found else None


def run_checks(config: BridgeConfig) -> list[Check]:
    """Every check against this host, its slurmctld and its Kubernetes credentials."""
    checks = [
        check_python("python", sys.executable, (sys.version_info.major, sys.version_info.minor))
    ]
    checks += _kubernetes_checks(config)
    checks += _slurm_checks(config)
    checks.append(_socket_check(config))
    for pool in config.pools:
        checks.append(_resolve(pool.name, pool.node_names[0]))
    return checks


def _kubernetes_checks(config: BridgeConfig) -> list[Check]:
    k = config.kubernetes
    source = k.kubeconfig or "the in-cluster service account"
    try:
        pods = PodGateway.connect(
            kubeconfig=k.kubeconfig,
            context=k.context,
            namespace=k.namespace,
            cluster_name=config.cluster_name,
            concurrency=1,
        )
    except BridgeError as e:
        return [Check(Status.FAIL, "credentials", str(e), "fix kubernetes.kubeconfig")]
    try:
        checks = [Check(Status.PASS, "credentials", f"loaded from {source}")]
        try:
            rules, incomplete = pods.access_rules()
            missing = missing_access(rules)
            cordon_missing = missing_access(rules, CORDON_ACCESS)
            if incomplete:  # another authorizer (webhook) may allow what RBAC's rules miss
                missing = [m for m in missing if not pods.may(*m.split(" ", 1))]
                cordon_missing = [m for m in cordon_missing if not pods.may(*m.split(" ", 1))]
        except BackendError as e:
            checks.append(Check(Status.FAIL, "rbac", str(e), "check the credentials and server"))
            return checks
        checks.append(check_rbac(missing, k.namespace, f"credentials from {source}"))
        checks.append(check_cordon_access(cordon_missing, f"credentials from {source}"))
        secret, fix = key_secret(config.slurm, k.namespace)
        checks.append(
            check_object(
                "Secret",
                secret,
                k.namespace,
                _exists(pods.secret_exists, secret),
                fix,
                readable=readable_names(rules, "secrets"),
            )
        )
        if k.node_service:
            checks.append(
                check_object(
                    "Service",
                    k.node_service,
                    k.namespace,
                    _exists(pods.service_exists, k.node_service),
                    "apply deploy/kustomize/base/node-service.yaml, or set "
                    'kubernetes.node_service: ""',
                    readable=readable_names(rules, "services"),
                )
            )
        checks.append(_route(pods))
        return checks
    except BackendError as e:
        return [*checks, Check(Status.FAIL, "kubernetes", str(e), "check the API server")]
    finally:
        pods.close()


def _exists(read: Any, name: str) -> bool | None:
    try:
        return bool(read(name))
    except Forbidden:
        return None


def _route(pods: PodGateway) -> Check:
    listed, _ = pods.list_pods()
    tried: dict[str, str] = {}
    for pod in [p for p in listed if p.is_running and p.ip][:5]:
        try:
            with socket.create_connection((pod.ip, SLURMD_PORT), timeout=1.0):
                pass
        except ConnectionRefusedError:
            pass  # the address answered: the route is there, slurmd is not listening yet
        except OSError as e:
            tried[pod.name] = f"{pod.ip}: {e.strerror or type(e).__name__}"
            continue
        tried[pod.name] = ""
        break
    return check_route(tried)


def _slurm_checks(config: BridgeConfig) -> list[Check]:
    s = config.slurm
    cli = SlurmCli(bin_dir=s.bin_dir, timeout_s=s.command_timeout_s, conf=s.conf, attempts=1)
    try:
        nodes = cli.list_nodes()
        settings = cli.show_config()
    except BridgeError as e:
        return [
            Check(
                Status.FAIL,
                "slurm",
                str(e),
                f"check that slurmctld runs and that {s.bin_dir}/scontrol works with "
                f"SLURM_CONF={s.conf or os.environ.get('SLURM_CONF') or '(default)'}",
            )
        ]
    pool_nodes = [name for pool in config.pools for name in pool.node_names]
    checks = [check_slurm(nodes, pool_nodes)]
    for key in HOOK_KEYS:
        path = settings.get(key, "")
        checks.append(
            check_hook_program(
                key,
                path,
                bool(path) and Path(path).exists(),
                bool(path) and os.access(path, os.X_OK),
            )
        )
    resume = settings.get("ResumeProgram", "")
    if resume and Path(resume).exists():
        checks.append(_hook_python(resume))
    return checks


def _hook_python(resume_program: str) -> Check:
    invoked, real = Path(resume_program), Path(resume_program).resolve()
    hooks_env = None
    for candidate in (invoked.parent / "hooks.env", real.parent / "hooks.env"):
        try:
            hooks_env = candidate.read_text()
            break
        except OSError:
            continue
    venv = real.parent.parent / ".venv" / "bin" / "python"
    executable = hook_python(resume_program, hooks_env, os.access(venv, os.X_OK))
    if not os.access(executable, os.X_OK):
        return Check(
            Status.FAIL,
            "hooks python",
            f"{executable} is not an executable (the hooks set their nodes DOWN)",
            "set SKB_PYTHON in hooks.env next to the hooks",
        )
    return check_python("hooks python", executable, python_version(executable))


def _socket_check(config: BridgeConfig) -> Check:
    b = config.bridge
    group_gid: int | None = None
    if b.socket_group is not None:
        try:
            group_gid = grp.getgrnam(b.socket_group).gr_gid
        except KeyError:
            group_gid = None
    try:
        slurm_user = read_slurm_user(config.slurm.conf)
    except BridgeError:
        slurm_user = "root"
    try:
        entry = pwd.getpwnam(slurm_user)
        slurm_uid: int | None = entry.pw_uid
        gids = frozenset(os.getgrouplist(slurm_user, entry.pw_gid))
    except KeyError:
        slurm_uid, gids = None, frozenset()
    facts = SocketFacts(
        path=b.socket,
        mode=b.socket_mode,
        group=b.socket_group,
        group_exists=b.socket_group is None or group_gid is not None,
        directory=_owner(Path(b.socket).parent),
        socket=_owner(Path(b.socket)),
        expected=Owner(
            os.geteuid(), group_gid if group_gid is not None else os.getegid(), b.socket_mode
        ),
        slurm_user=slurm_user,
        slurm_uid=slurm_uid,
        slurm_gids=gids,
    )
    return check_socket(facts)


def _owner(path: Path) -> Owner | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return Owner(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))


def _resolve(pool: str, node: str) -> Check:
    try:
        infos = socket.getaddrinfo(node, SLURMD_PORT, proto=socket.IPPROTO_TCP)
    except OSError as e:
        return check_name(pool, node, [], str(e.strerror or e))
    addresses = sorted({str(info[4][0]) for info in infos})
    return check_name(pool, node, addresses, "")
