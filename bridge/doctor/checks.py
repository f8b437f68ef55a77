"""The doctor's decisions: pure functions from facts to a :class:`Check` each, tested as tables.

Each check ends in PASS, WARN (worth a look, not known to break the bridge), FAIL (the bridge or
its hooks will not work; the command exits non-zero) or SKIP (nothing to check), with a named
cause and, unless it passed, what to do.
"""

from __future__ import annotations

import enum
import grp
import pwd
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bridge.domain.gang_mode import POD_GROUP_API_GROUP, GangMode
from bridge.domain.nodes import SlurmNode
from bridge.domain.pod_rendering import AUTH_SLURM
from bridge.settings import SlurmSettings

#: What the bridge does with its credentials: (core resource, verbs).
REQUIRED_ACCESS: Final = (
    ("pods", ("create", "delete", "get", "list", "watch", "patch")),
    ("pods/status", ("patch",)),
    ("events", ("create", "list")),
)
#: What cordon handling needs (cluster-scoped): without it cordoned Kubernetes nodes do not drain
#: their Slurm nodes first, and the bridge works otherwise.
CORDON_ACCESS: Final = (("nodes", ("list",)),)
CORDON_FIX: Final = (
    "apply the ClusterRole slurm-k8s-bridge-nodes and its ClusterRoleBinding "
    "(deploy/kustomize/namespace/node-reader.yaml)"
)
#: What gang scheduling needs (``scheduling.k8s.io``, in the namespace) when the API server
#: serves PodGroups: without it a multi-node job's pods are placed one by one.
POD_GROUP_ACCESS: Final = (("podgroups", ("create", "list", "patch", "delete")),)
#: slurm.conf keys naming the programs slurmctld runs for power saving.
HOOK_KEYS: Final = ("ResumeProgram", "SuspendProgram", "ResumeFailProgram")
#: The oldest Python the package and its hooks run on (``python -P``, ``datetime.UTC``).
MIN_PYTHON: Final = (3, 11)
SLURMD_PORT: Final = 6818
RBAC_FIX: Final = "apply the Role of deploy/kustomize/base/rbac.yaml to these credentials"


class Status(enum.Enum):
    PASS = "PASS"  # noqa: S105 (a verdict, not a password)
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Check:
    """One check's verdict: ``name`` says what was checked, ``cause`` why it ended so."""

    status: Status
    name: str
    cause: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status.value}  {self.name}: {self.cause}"
        if self.fix and self.status is not Status.PASS:
            text += f" -> {self.fix}"
        return text


def failed(checks: Iterable[Check]) -> bool:
    return any(c.status is Status.FAIL for c in checks)


def summary(checks: Sequence[Check]) -> str:
    counts = {s: sum(1 for c in checks if c.status is s) for s in Status}
    return ", ".join(f"{counts[s]} {s.value.lower()}" for s in Status if counts[s]) or "no checks"


# ---------------------------------------------------------------------------------------------
# Kubernetes


def rule_allows(
    rule: Mapping[str, Any], verb: str, resource: str, name: str = "", *, group: str = ""
) -> bool:
    """Whether one ``resourceRules`` entry of a SelfSubjectRulesReview allows ``verb`` on the
    ``resource`` of API ``group`` ("" the core group; named ``name``; without a name, only a
    rule without ``resourceNames`` counts)."""

    def has(key: str, wanted: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or wanted in values

    if not (has("verbs", verb) and has("apiGroups", group) and has("resources", resource)):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(name) and name in names)


def missing_access(
    rules: Sequence[Mapping[str, Any]],
    required: Sequence[tuple[str, Sequence[str]]] = REQUIRED_ACCESS,
    *,
    group: str = "",
) -> list[str]:
    """``"<verb> <resource>"`` for every required permission (of API ``group``) no rule
    grants."""
    return [
        f"{verb} {resource}"
        for resource, verbs in required
        for verb in verbs
        if not any(rule_allows(rule, verb, resource, group=group) for rule in rules)
    ]


def check_rbac(missing: Sequence[str], namespace: str, who: str) -> Check:
    if missing:
        return Check(
            Status.FAIL,
            "rbac",
            f"{who} may not {', '.join(missing)} in namespace {namespace}",
            f"grant {', '.join(missing)} in {namespace} ({RBAC_FIX})",
        )
    wanted = "; ".join(f"{r}: {', '.join(v)}" for r, v in REQUIRED_ACCESS)
    return Check(Status.PASS, "rbac", f"{who} may {wanted} in namespace {namespace}")


def check_cordon_access(missing: Sequence[str], who: str) -> Check:
    """A warning, not a failure: only the drain of Slurm nodes on cordoned hosts is lost."""
    if missing:
        return Check(
            Status.WARN,
            "rbac-cordons",
            f"{who} may not {', '.join(missing)} (cluster-wide): cordoned Kubernetes nodes "
            "will not drain their Slurm nodes first",
            CORDON_FIX,
        )
    return Check(Status.PASS, "rbac-cordons", f"{who} may list nodes (cordon handling on)")


def check_gang_scheduling(
    mode: GangMode, missing: Sequence[str], who: str, *, unknown: str = ""
) -> Check:
    """Which mode the bridge would run (``kubernetes.gang_scheduling`` and the API server's
    PodGroup API; ``unknown``: why that could not be discovered) and, when on, whether it may
    work the groups. A warning at worst: without them a multi-node job's pods are placed one
    by one, as without gang scheduling."""
    name = "gang scheduling"
    if unknown:
        return Check(Status.WARN, name, mode.describe(), "check the API server")
    if mode.on and missing:
        granted = ", ".join(missing)
        return Check(
            Status.WARN,
            name,
            f"{mode.describe()}, but {who} may not {granted} ({POD_GROUP_API_GROUP}): a "
            "multi-node job's pods are then placed one by one",
            f"grant {granted} on {POD_GROUP_API_GROUP} podgroups ({RBAC_FIX}), or set "
            "kubernetes.gang_scheduling: off",
        )
    if mode.on:
        wanted = ", ".join(POD_GROUP_ACCESS[0][1])
        return Check(Status.PASS, name, f"{mode.describe()}; {who} may {wanted} podgroups")
    return Check(Status.SKIP, name, mode.describe())


def readable_names(rules: Sequence[Mapping[str, Any]], resource: str) -> list[str]:
    """The names of ``resource`` the rules allow to ``get`` when they allow only named ones
    (``resourceNames``); empty when they allow none, or any name."""
    names: list[str] = []
    for rule in rules:
        if rule_allows(rule, "get", resource):
            return []
        if rule_allows({**rule, "resourceNames": []}, "get", resource):
            names += [n for n in rule.get("resourceNames") or [] if n not in names]
    return names


def key_secret(slurm: SlurmSettings, namespace: str) -> tuple[str, str]:
    """The Secret the pods mount for ``slurm.auth`` (munge's or auth/slurm's key, never both)
    and how to create it."""
    if slurm.auth == AUTH_SLURM:
        secret = slurm.slurm_key_secret
        source = "slurmctld's key", "slurm.key=/etc/slurm/slurm.key"
    else:
        secret = slurm.munge_key_secret
        source = "the site's munge key", "munge.key=/etc/munge/munge.key"
    return secret, (
        f"create it from {source[0]}: kubectl -n {namespace} create secret generic {secret} "
        f"--from-file={source[1]}"
    )


def check_object(
    kind: str,
    name: str,
    namespace: str,
    exists: bool | None,
    fix: str,
    *,
    readable: Sequence[str] = (),
) -> Check:
    """A Secret or Service the pods need. ``exists`` None: the credentials may not read it;
    ``readable``: the names of that kind they may read (the Role names them)."""
    what = f"{kind} {name}"
    check = f"{kind.lower()} {name}"
    if exists is None and readable:
        return Check(
            Status.FAIL,
            check,
            f"{what} is not one these credentials may read in namespace {namespace} (their "
            f"Role names only {', '.join(readable)}): the configuration and the Role disagree",
            f"fix the name in the configuration, or the Role's resourceNames ({RBAC_FIX})",
        )
    if exists is None and kind == "Secret":
        # By design: a Role that may read the key Secret hands the key to whoever holds the
        # bridge's token, and the bridge itself never reads it (the pods mount it).
        return Check(
            Status.WARN,
            check,
            f"cannot tell whether {what} exists in namespace {namespace}: the bridge may not "
            "read Secrets (docs/security.md)",
            f"check as an administrator: kubectl -n {namespace} get secret {name}",
        )
    if exists is None:
        return Check(
            Status.WARN,
            check,
            f"cannot tell whether {what} exists in namespace {namespace}: "
            f"these credentials may not get {kind.lower()}s named {name}",
            f"check with kubectl -n {namespace} get {kind.lower()} {name}, or allow get on it "
            f"({RBAC_FIX})",
        )
    if not exists:
        return Check(Status.FAIL, check, f"{what} not found in namespace {namespace}", fix)
    return Check(Status.PASS, check, f"{what} exists in namespace {namespace}")


# ---------------------------------------------------------------------------------------------
# Slurm


def check_slurm(nodes: Sequence[SlurmNode], pool_nodes: Sequence[str]) -> Check:
    listed = {n.name for n in nodes}
    known = sum(1 for name in pool_nodes if name in listed)
    cause = (
        f"slurmctld answers: {len(nodes)} node(s) listed, {known} of the pools' {len(pool_nodes)}"
    )
    if known == 0:
        return Check(
            Status.FAIL,
            "slurm",
            cause,
            "Include the output of `slurm-k8s-bridge render-slurm-conf` in slurm.conf and run "
            "scontrol reconfigure (Slurm 22.05 also needs PrivateData=cloud to list powered-down "
            "CLOUD nodes)",
        )
    if known < len(pool_nodes):
        return Check(
            Status.WARN,
            "slurm",
            cause + "; the others are unknown to Slurm and the bridge will refuse them",
            "render slurm.conf again from this configuration (render-slurm-conf)",
        )
    return Check(Status.PASS, "slurm", cause)


def check_site_names(path: str, clashes: Sequence[str], error: str = "") -> Check:
    """Whether the pools reuse partition or node names the site's slurm.conf defines."""
    if error:
        return Check(
            Status.WARN,
            "site names",
            f"not compared with the site's slurm.conf: {error}",
            "set slurm.conf in the bridge's configuration to the site's slurm.conf",
        )
    if clashes:
        return Check(
            Status.FAIL,
            "site names",
            "; ".join(clashes) + " (slurmctld refuses a name defined twice)",
            "give each pool a partition and nodes of its own, then render-slurm-conf again",
        )
    return Check(Status.PASS, "site names", f"no pool reuses a name {path} defines")


def check_list_globals(missing: Sequence[str], error: str = "") -> Check:
    """Whether the running config's list-valued globals hold the bridge's entries (the site's
    own lines carry them: the rendered fragment does not set them)."""
    if error:
        return Check(Status.WARN, "list globals", f"not compared: {error}")
    if missing:
        return Check(
            Status.FAIL,
            "list globals",
            "; ".join(missing),
            "edit the site's own slurm.conf lines (the fragment's comments name the entries), "
            "then `scontrol reconfigure`",
        )
    return Check(
        Status.PASS, "list globals", "SlurmctldParameters (and GresTypes) hold the bridge's entries"
    )


def check_site_handoff(
    hooks_env: str, handed: Mapping[str, str], problems: Sequence[str], unhanded: Sequence[str]
) -> Check:
    """The hand-off of nodes no pool owns to the site's own power-saving programs:
    ``handed`` key → program (hooks.env's SKB_SITE_*), ``problems`` those the hooks could not
    run, ``unhanded`` site programs (its own slurm.conf lines) the bridge's replace with none."""
    if problems or unhanded:
        return Check(
            Status.FAIL,
            "site hand-off",
            "; ".join([*problems, *unhanded]),
            f"set SKB_SITE_*_PROGRAM in {hooks_env} to the site's programs (absolute paths, "
            "executable by SlurmUser)",
        )
    if not handed:
        return Check(
            Status.PASS,
            "site hand-off",
            "none configured: nodes no pool owns are not handed on (the site has no "
            "power-saving programs of its own)",
        )
    return Check(
        Status.PASS,
        "site hand-off",
        "nodes no pool owns go to " + ", ".join(f"{k}={v}" for k, v in handed.items()),
    )


def check_hook_program(key: str, path: str, exists: bool, executable: bool) -> Check:
    name = key
    if not path:
        return Check(
            Status.FAIL,
            name,
            f"{key} is not set in the running slurm.conf: power saving does not call the bridge",
            "Include the output of `slurm-k8s-bridge render-slurm-conf` in slurm.conf",
        )
    if not exists:
        return Check(
            Status.FAIL,
            name,
            f"{path} does not exist (Slurm disables power saving or calls nothing)",
            "install the hooks there or render slurm.conf again with the right hooks directory",
        )
    if not executable:
        return Check(Status.FAIL, name, f"{path} is not executable", f"chmod 0755 {path}")
    return Check(Status.PASS, name, f"{path} exists and is executable")


def check_python(name: str, executable: str, version: tuple[int, int] | None) -> Check:
    want = ".".join(map(str, MIN_PYTHON))
    if version is None:
        return Check(
            Status.WARN,
            name,
            f"cannot tell the version of {executable}",
            f"make sure it is Python {want} or later with slurm-k8s-bridge installed",
        )
    shown = ".".join(map(str, version))
    if version < MIN_PYTHON:
        return Check(
            Status.FAIL,
            name,
            f"{executable} is Python {shown}, older than {want}",
            f"point SKB_PYTHON in hooks.env at a Python {want}+ with slurm-k8s-bridge installed",
        )
    return Check(Status.PASS, name, f"{executable} is Python {shown}")


# ---------------------------------------------------------------------------------------------
# The socket


@dataclass(frozen=True)
class Owner:
    """Owner, group and permission bits of a file (or what they will be)."""

    uid: int
    gid: int
    mode: int

    def permits(self, uid: int, gids: frozenset[int], bits: int) -> bool:
        """Whether a user (``uid``, all its groups ``gids``) has ``bits`` (0o7 form) here."""
        if uid == 0:
            return True
        if uid == self.uid:
            return (self.mode >> 6) & bits == bits
        if self.gid in gids:
            return (self.mode >> 3) & bits == bits
        return self.mode & bits == bits


@dataclass(frozen=True)
class SocketFacts:
    path: str
    mode: int  # configured
    group: str | None  # configured
    group_exists: bool
    directory: Owner | None  # None: does not exist
    socket: Owner | None  # None: not there (the bridge is not running)
    expected: Owner  # what the bridge would create: its uid, the group, the mode
    slurm_user: str
    slurm_uid: int | None  # None: no such user here
    slurm_gids: frozenset[int]


def check_socket(f: SocketFacts) -> Check:
    name = "socket"
    if f.group is not None and not f.group_exists:
        return Check(
            Status.FAIL,
            name,
            f"bridge.socket_group {f.group} is not a group on this host",
            f"create it (SlurmUser {f.slurm_user}'s group) or set bridge.socket_group",
        )
    directory = str(Path(f.path).parent)
    if f.slurm_uid is None:
        return Check(
            Status.FAIL,
            name,
            f"SlurmUser {f.slurm_user} is not a user on this host",
            "run the bridge on the slurmctld host, or fix SlurmUser",
        )
    if f.directory is None:
        return Check(
            Status.WARN,
            name,
            f"{directory} does not exist yet",
            "the bridge creates it if it may; under systemd RuntimeDirectory= does "
            "(deploy/systemd/slurm-k8s-bridge.service)",
        )
    where = f.socket or f.expected
    shown = f"{f.path} ({_describe(where)})"
    if not f.directory.permits(f.slurm_uid, f.slurm_gids, 0o1):
        return Check(
            Status.FAIL,
            name,
            f"SlurmUser {f.slurm_user} cannot enter {directory} ({_describe(f.directory)}), "
            "so its hooks cannot reach the bridge",
            "give the directory SlurmUser's group and mode 0750 (RuntimeDirectoryMode=0750, "
            "Group= SlurmUser's group)",
        )
    if not where.permits(f.slurm_uid, f.slurm_gids, 0o2):
        return Check(
            Status.FAIL,
            name,
            f"SlurmUser {f.slurm_user} may not connect to {shown}",
            f"set bridge.socket_group to a group {f.slurm_user} is in and bridge.socket_mode "
            "to 0660",
        )
    if f.socket is not None and (f.socket.mode != f.mode):
        return Check(
            Status.WARN,
            name,
            f"{f.path} has mode {f.socket.mode:04o}, configured {f.mode:04o}",
            "restart the bridge (it sets the mode when it starts)",
        )
    state = "bridge listening" if f.socket is not None else "bridge not running; as configured"
    return Check(Status.PASS, name, f"{shown}, {state}: SlurmUser {f.slurm_user} may connect")


def _describe(owner: Owner) -> str:
    return f"{_user(owner.uid)}:{_group(owner.gid)} {owner.mode:04o}"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# ---------------------------------------------------------------------------------------------
# The network


def check_name(pool: str, node: str, addresses: Sequence[str], error: str) -> Check:
    name = f"dns {node}"
    if addresses:
        return Check(Status.PASS, name, f"pool {pool}: {node} resolves to {', '.join(addresses)}")
    return Check(
        Status.WARN,
        name,
        f"pool {pool}: {node} does not resolve on this host ({error}); slurmctld addresses a "
        "node by its name until its slurmd registers",
        "add the cloud node names to DNS or /etc/hosts on the slurmctld host "
        "(see docs/site-guide.md, Networking)",
    )


def check_route(tried: Mapping[str, str]) -> Check:
    """``tried``: pod name → ``""`` when its IP answered on 6818 (even with a refusal), else
    the error."""
    name = "route to pods"
    if not tried:
        return Check(Status.SKIP, name, "no running pod of the bridge's to try")
    reached = [pod for pod, error in tried.items() if not error]
    if reached:
        return Check(Status.PASS, name, f"pod {reached[0]} answers at its IP on {SLURMD_PORT}")
    detail = "; ".join(f"{pod}: {error}" for pod, error in tried.items())
    return Check(
        Status.WARN,
        name,
        f"no pod IP answered on {SLURMD_PORT} from this host ({detail})",
        "slurmctld must reach slurmd at the pod IP: route the pod CIDR to the cluster, "
        "or use hostNetwork (see docs/site-guide.md, Networking)",
    )
