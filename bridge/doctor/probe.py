"""The doctor's facts: gathered from this host, its slurmctld (:class:`SlurmCli`, one no-op node
write among the reads) and Kubernetes (:class:`PodGateway`, and a dry-run create of each pool's
pod), then judged by :mod:`bridge.doctor.checks`, :mod:`~bridge.doctor.slurm_writes`,
:mod:`~bridge.doctor.images` and :mod:`~bridge.doctor.hook_runtime`."""

from __future__ import annotations

import grp
import os
import pwd
import socket
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from bridge.adapters.kubernetes import PodGateway
from bridge.adapters.kubernetes.dry_run import dry_run_create_pod
from bridge.adapters.slurm.cli import SlurmCli, read_slurm_user
from bridge.adapters.slurm.conf_files import read_site_names, slurm_conf_path
from bridge.doctor.checks import (
    CORDON_ACCESS,
    HOOK_KEYS,
    POD_GROUP_ACCESS,
    SLURMD_PORT,
    Check,
    Owner,
    SocketFacts,
    Status,
    check_cordon_access,
    check_gang_scheduling,
    check_hook_program,
    check_list_globals,
    check_name,
    check_object,
    check_python,
    check_rbac,
    check_route,
    check_site_handoff,
    check_site_names,
    check_slurm,
    check_socket,
    key_secret,
    missing_access,
    readable_names,
)
from bridge.doctor.hook_runtime import HookFiles, check_hook_runtime, hook_runtime
from bridge.doctor.images import (
    check_image_names,
    check_pod_admission,
    check_slurmd_series,
    pod_images,
    series_of_version,
    slurmd_image,
)
from bridge.doctor.interpreter import run_hook_python
from bridge.doctor.slurm_writes import check_slurm_write, write_probe_node
from bridge.domain.gang_mode import GANG_OFF, POD_GROUP_API_GROUP, gang_mode
from bridge.domain.nodes import SlurmNode
from bridge.domain.pod_rendering import render_pod
from bridge.domain.pods import PodView
from bridge.domain.pools import NodePool
from bridge.domain.site_names import POWER_PROGRAMS, clashes, site_programs
from bridge.domain.slurm_conf import missing_list_entries, required_list_entries
from bridge.errors import BackendError, BridgeError, Forbidden
from bridge.settings import BridgeConfig, hooks_env_path, hooks_env_values

#: Enough of a hook to see its shebang, pip's exec line and whether it sources hook.sh.
HOOK_HEAD_BYTES: Final = 4096


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
        checks.append(_gang_check(config, pods, rules, incomplete, f"credentials from {source}"))
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
        listed, _ = pods.list_pods()
        checks += _dry_runs(pods, config, {p.name for p in listed}, "create pods" not in missing)
        checks.append(_route(listed))
        return checks
    except BackendError as e:
        return [*checks, Check(Status.FAIL, "kubernetes", str(e), "check the API server")]
    finally:
        pods.close()


def _gang_check(
    config: BridgeConfig,
    pods: PodGateway,
    rules: Sequence[Mapping[str, Any]],
    incomplete: bool,
    who: str,
) -> Check:
    """The gang scheduling mode the bridge would run, and the PodGroup rights it needs then."""
    served, unknown = None, ""
    if config.kubernetes.gang_scheduling != GANG_OFF:
        try:
            served = pods.pod_group_api()
        except BackendError as e:
            unknown = str(e)
    mode = gang_mode(config.kubernetes.gang_scheduling, served, unknown=unknown)
    missing: list[str] = []
    if mode.on:
        missing = missing_access(rules, POD_GROUP_ACCESS, group=POD_GROUP_API_GROUP)
        if incomplete:  # another authorizer (webhook) may allow what RBAC's rules miss
            missing = [
                m for m in missing if not pods.may(*m.split(" ", 1), group=POD_GROUP_API_GROUP)
            ]
    return check_gang_scheduling(mode, missing, who, unknown=unknown)


def _exists(read: Any, name: str) -> bool | None:
    try:
        return bool(read(name))
    except Forbidden:
        return None


def _dry_runs(
    pods: PodGateway, config: BridgeConfig, existing: set[str], may_create: bool
) -> list[Check]:
    """Each pool's pod, rendered as the bridge renders it, sent as a server-side dry run: for
    a node with no pod when there is one (a pod of the name answers 409 after admission)."""
    if not may_create:
        return [
            Check(
                Status.SKIP,
                "pod dry runs",
                "not tried: these credentials may not create pods (see rbac)",
            )
        ]
    checks: list[Check] = []
    for pool in config.pools:
        node = next((n for n in pool.node_names if n not in existing), pool.node_names[0])
        manifest = _render(pool, node, config)
        if isinstance(manifest, Check):
            checks.append(manifest)
            continue
        bad_name = check_image_names(pool.name, pod_images(manifest))
        if bad_name is not None:
            checks.append(bad_name)
            continue
        try:
            created = dry_run_create_pod(pods, manifest)
        except BridgeError as e:
            checks.append(check_pod_admission(pool.name, node, pods.namespace, e))
            continue
        checks.append(
            check_pod_admission(pool.name, node, pods.namespace, None, exists=not created)
        )
    return checks


def _render(pool: NodePool, node: str, config: BridgeConfig) -> dict[str, Any] | Check:
    """The pod the bridge would create for ``node``, or a FAIL saying why it cannot render it
    (check-config says the same; a configuration is loaded without rendering)."""
    try:
        return render_pod(pool, node, config.pod_settings())
    except (BridgeError, ValueError) as e:
        return Check(
            Status.FAIL,
            f"pod {pool.name}",
            f"pool {pool.name}: its pod cannot be rendered: {e}",
            "fix the pool (slurm-k8s-bridge check-config names the field)",
        )


def _route(listed: Sequence[PodView]) -> Check:
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
        # Every node, unlike the bridge's passes (the pools' only): doctor runs once, by hand,
        # and how many nodes slurmctld lists at all tells "slurm.conf lacks the pools' nodes"
        # from "slurmctld shows no node to us" (check_slurm names both counts).
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
    checks = [
        check_slurm(nodes, pool_nodes),
        _site_names_check(config),
        _list_globals_check(config, settings),
    ]
    checks.append(_write_check(cli, nodes, pool_nodes, settings, s.conf))
    checks += _series_checks(config, cli, settings)
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
        checks.append(probe_hooks_python(resume))
        checks.append(_handoff_check(config, settings, Path(resume)))
    return checks


def _program_problem(program: str) -> str:
    """Why a hook could not exec ``program``, or ""."""
    if not program.startswith("/"):
        return f"{program} is not an absolute path"
    if not Path(program).is_file():
        return f"{program} does not exist"
    if not os.access(program, os.X_OK):
        return f"{program} is not executable"
    return ""


def _handoff_check(config: BridgeConfig, settings: dict[str, str], resume: Path) -> Check:
    """hooks.env's SKB_SITE_*_PROGRAM: each one the hooks can run; and each program the
    site's own slurm.conf lines set, which the bridge's replace, handed off."""
    env_path = hooks_env_path(resume, os.environ)
    try:
        handed = hooks_env_values(env_path.read_text(errors="replace"), POWER_PROGRAMS.values())
    except OSError:
        handed = {}
    handed = {key: value for key, value in handed.items() if value}
    problems = [
        f"{key}: {problem}"
        for key, program in handed.items()
        if (problem := _program_problem(program))
    ]
    unhanded = []
    try:
        site = site_programs(read_site_names(slurm_conf_path(config.slurm.conf)))
    except BridgeError:
        site = {}
    for key, program in site.items():
        running = settings.get(key, "")
        if program != running and handed.get(POWER_PROGRAMS[key]) != program:
            unhanded.append(f"the site's {key}={program} is replaced by {running}, not handed off")
    return check_site_handoff(str(env_path), handed, problems, unhanded)


def _write_check(
    cli: SlurmCli,
    nodes: Sequence[SlurmNode],
    pool_nodes: Sequence[str],
    settings: dict[str, str],
    conf: str | None,
) -> Check:
    """Set one pool node's Comment to what it is: slurmctld authorizes it as the bridge's own
    node updates, and nobody sees a change."""
    node = write_probe_node(nodes, pool_nodes)
    error: BridgeError | None = None
    if node is not None:
        try:
            cli.set_node_comment([node.name], node.comment)
        except BridgeError as e:
            error = e
    return check_slurm_write(node, _user_name(os.geteuid()), _slurm_user(settings, conf), error)


def _site_names_check(config: BridgeConfig) -> Check:
    path = slurm_conf_path(config.slurm.conf)
    try:
        found = clashes(config.pools, read_site_names(path))
    except BridgeError as e:
        return check_site_names(str(path), [], str(e))
    return check_site_names(str(path), [str(c) for c in found])


def _list_globals_check(config: BridgeConfig, settings: dict[str, str]) -> Check:
    """The bridge's entries in the running SlurmctldParameters and GresTypes."""
    try:
        required = required_list_entries(
            config.pools, slurm_version=settings.get("SLURM_VERSION", "")
        )
    except BridgeError as e:
        return check_list_globals([], str(e))
    return check_list_globals([str(m) for m in missing_list_entries(required, settings)])


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _slurm_user(settings: dict[str, str], conf: str | None) -> str:
    """SlurmUser as slurmctld runs it (``root(0)`` in show config), else from slurm.conf."""
    shown = settings.get("SlurmUser", "").split("(", 1)[0].strip()
    if shown:
        return shown
    try:
        return read_slurm_user(conf)
    except BridgeError:
        return "root"


def _series_checks(config: BridgeConfig, cli: SlurmCli, settings: dict[str, str]) -> list[Check]:
    """The Slurm series of each distinct slurmd image against slurmctld's (its SLURM_VERSION;
    the client's when show config lacks it)."""
    controller = series_of_version(settings.get("SLURM_VERSION", ""))
    if not controller:
        try:
            controller = cli.version().series
        except BridgeError:
            controller = ""
    images: dict[str, list[str]] = {}
    for pool in config.pools:
        manifest = _render(pool, pool.node_names[0], config)
        if isinstance(manifest, dict):  # a pool that does not render has its FAIL already
            images.setdefault(slurmd_image(manifest), []).append(pool.name)
    return [check_slurmd_series(image, pools, controller) for image, pools in images.items()]


def probe_hooks_python(resume_program: str) -> Check:
    """What ResumeProgram runs, found as it finds it; its Python run as slurmctld would."""
    files = probe_hook_files(resume_program)
    runtime = hook_runtime(files)
    run = run_hook_python(runtime) if runtime.python else None
    where = files.hooks_env_path or str(Path(resume_program).parent / "hooks.env")
    return check_hook_runtime(runtime, run, where)


def probe_hook_files(program: str) -> HookFiles:
    """What ``program`` is and what lies beside it, read as hook.sh would find it."""
    invoked = Path(program)
    real = invoked.resolve()
    try:
        with real.open("rb") as f:
            head: str | None = f.read(HOOK_HEAD_BYTES).decode(errors="replace")
    except OSError:
        head = None
    # hook.sh: hooks.env beside the hook as invoked if readable, else beside the real file.
    env_path, env_text = "", None
    for candidate in (invoked.parent / "hooks.env", real.parent / "hooks.env"):
        if os.access(candidate, os.R_OK):
            try:
                env_text = candidate.read_text(errors="replace")
            except OSError:
                continue
            env_path = str(candidate)
            break
    repo = real.parent.parent
    return HookFiles(
        program=program,
        real=str(real),
        head=head,
        hooks_env_path=env_path,
        hooks_env=env_text,
        go_client=_executable(real.parent / "bin" / "skb-hook"),
        venv_python=_executable(repo / ".venv" / "bin" / "python"),
        checkout=(repo / "bridge" / "hooks.py").is_file(),
    )


def _executable(path: Path) -> bool:
    """``test -x``: an executable that is not a directory."""
    return os.access(path, os.X_OK) and not path.is_dir()


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
