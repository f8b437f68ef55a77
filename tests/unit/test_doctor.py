"""The doctor's decisions, as tables: RBAC rules → missing verbs, objects (the key Secret),
Slurm and its write rights, hooks, Python, socket permissions, name resolution and routes, the
pools' pods (image names, the API server's dry-run answers) and the slurmd image's series; and
the subcommand's exit status. What the hooks run: tests/unit/test_doctor_hooks.py."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge import doctor
from bridge.adapters.slurm.cli import parse_show_config
from bridge.cli.main import main
from bridge.doctor import Check, Owner, SocketFacts, Status
from bridge.domain.gang_mode import GANG_MODE_OFF, GangMode
from bridge.domain.nodes import SlurmNode
from bridge.errors import (
    BackendError,
    BridgeError,
    Forbidden,
    InvalidInput,
    NoCapacity,
    TransientBackendError,
)
from bridge.settings import SlurmSettings

POD_RULE = {
    "verbs": ["get", "list", "watch", "create", "delete", "patch"],
    "apiGroups": [""],
    "resources": ["pods"],
}
POD_STATUS_RULE = {"verbs": ["patch"], "apiGroups": [""], "resources": ["pods/status"]}
EVENT_RULE = {"verbs": ["create", "list"], "apiGroups": [""], "resources": ["events"]}
# What every authenticated user gets (system:basic-user and friends): non-resource rules aside.
REVIEWS = {
    "verbs": ["create"],
    "apiGroups": ["authorization.k8s.io"],
    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
}


@pytest.mark.parametrize(
    ("rules", "missing"),
    [
        ([POD_RULE, POD_STATUS_RULE, EVENT_RULE, REVIEWS], []),
        ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], []),
        (
            [
                {**POD_RULE, "verbs": ["get", "list", "watch", "delete", "patch"]},
                POD_STATUS_RULE,
                EVENT_RULE,
            ],
            ["create pods"],
        ),
        # The Role before issue 13: the Slurm state cannot be shown on the pods.
        (
            [{**POD_RULE, "verbs": ["get", "list", "watch", "create", "delete"]}, EVENT_RULE],
            ["patch pods", "patch pods/status"],
        ),
        ([POD_RULE, POD_STATUS_RULE], ["create events", "list events"]),
        (
            [REVIEWS],
            [
                "create pods",
                "delete pods",
                "get pods",
                "list pods",
                "watch pods",
                "patch pods",
                "patch pods/status",
                "create events",
                "list events",
            ],
        ),
        # Pods of another API group are not the core pods.
        (
            [{**POD_RULE, "apiGroups": ["metrics.k8s.io"]}, POD_STATUS_RULE, EVENT_RULE],
            ["create pods", "delete pods", "get pods", "list pods", "watch pods", "patch pods"],
        ),
        # A rule for named pods only does not allow creating (or listing) any pod.
        (
            [{**POD_RULE, "resourceNames": ["cpu-0"]}, POD_STATUS_RULE, EVENT_RULE],
            ["create pods", "delete pods", "get pods", "list pods", "watch pods", "patch pods"],
        ),
    ],
)
def test_missing_access(rules: list[Mapping[str, Any]], missing: list[str]) -> None:
    assert doctor.missing_access(rules) == missing


#: A Role rule that names one Secret.
ONE_SECRET_RULE = {
    "verbs": ["get"],
    "apiGroups": [""],
    "resources": ["secrets"],
    "resourceNames": ["slurm-munge-key"],
}


@pytest.mark.parametrize(
    ("rule", "verb", "resource", "name", "allowed"),
    [
        (ONE_SECRET_RULE, "get", "secrets", "slurm-munge-key", True),
        (ONE_SECRET_RULE, "get", "secrets", "other", False),
        (ONE_SECRET_RULE, "get", "secrets", "", False),
        (
            {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]},
            "get",
            "secrets",
            "x",
            True,
        ),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}, "get", "services", "", True),
        ({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}, "get", "pods", "", False),
    ],
)
def test_rule_allows(
    rule: Mapping[str, Any], verb: str, resource: str, name: str, allowed: bool
) -> None:
    assert doctor.rule_allows(rule, verb, resource, name) is allowed


def test_rbac_failure_names_the_missing_verb_and_namespace() -> None:
    check = doctor.check_rbac(["create pods"], "throwaway", "credentials from /k")
    assert check.status is Status.FAIL
    assert "may not create pods in namespace throwaway" in check.line()
    assert "deploy/kustomize/base/rbac.yaml" in check.line()
    assert doctor.check_rbac([], "slurm", "x").status is Status.PASS


@pytest.mark.parametrize(
    ("exists", "status", "text"),
    [
        (True, Status.PASS, "Secret slurm-munge-key exists in namespace slurm"),
        (False, Status.FAIL, "Secret slurm-munge-key not found in namespace slurm"),
        (None, Status.WARN, "cannot tell whether Secret slurm-munge-key exists"),
    ],
)
def test_secret(exists: bool | None, status: Status, text: str) -> None:
    check = doctor.check_object("Secret", "slurm-munge-key", "slurm", exists, "create it")
    assert check.status is status
    assert text in check.line()


@pytest.mark.parametrize(
    ("slurm", "secret", "fix"),
    [
        (
            SlurmSettings(),
            "slurm-munge-key",
            "kubectl -n hpc create secret generic slurm-munge-key "
            "--from-file=munge.key=/etc/munge/munge.key",
        ),
        (
            SlurmSettings(auth="slurm"),
            "slurm-key",
            "kubectl -n hpc create secret generic slurm-key "
            "--from-file=slurm.key=/etc/slurm/slurm.key",
        ),
        (
            SlurmSettings(auth="slurm", slurm_key_secret="k2", munge_key_secret="m2"),  # noqa: S106
            "k2",
            "kubectl -n hpc create secret generic k2 --from-file=slurm.key=/etc/slurm/slurm.key",
        ),
    ],
)
def test_the_key_secret_follows_slurm_auth(slurm: SlurmSettings, secret: str, fix: str) -> None:
    name, how = doctor.key_secret(slurm, "hpc")
    assert name == secret
    assert how.endswith(fix), how


def test_pass_lines_carry_no_fix_and_others_do() -> None:
    assert Check(Status.PASS, "a", "fine", "do x").line() == "PASS  a: fine"
    assert Check(Status.FAIL, "a", "broken", "do x").line() == "FAIL  a: broken -> do x"


def node(name: str) -> SlurmNode:
    return SlurmNode(name=name, state="IDLE", flags=frozenset({"CLOUD", "POWERED_DOWN"}))


@pytest.mark.parametrize(
    ("listed", "status"),
    [
        (["cpu-0", "cpu-1", "login"], Status.PASS),
        (["cpu-0", "login"], Status.WARN),
        (["login"], Status.FAIL),
        ([], Status.FAIL),
    ],
)
def test_slurm_knows_the_pools_nodes(listed: list[str], status: Status) -> None:
    assert doctor.check_slurm([node(n) for n in listed], ["cpu-0", "cpu-1"]).status is status


@pytest.mark.parametrize(
    ("path", "exists", "executable", "status", "text"),
    [
        ("/opt/h/resume", True, True, Status.PASS, "exists and is executable"),
        ("/opt/h/resume", True, False, Status.FAIL, "is not executable"),
        ("/opt/h/resume", False, False, Status.FAIL, "does not exist"),
        ("", False, False, Status.FAIL, "is not set"),
    ],
)
def test_hook_program(path: str, exists: bool, executable: bool, status: Status, text: str) -> None:
    check = doctor.check_hook_program("ResumeProgram", path, exists, executable)
    assert check.status is status
    assert text in check.cause


@pytest.mark.parametrize(
    ("version", "status"),
    [((3, 13), Status.PASS), ((3, 11), Status.PASS), ((3, 9), Status.FAIL), (None, Status.WARN)],
)
def test_python_version(version: tuple[int, int] | None, status: Status) -> None:
    assert doctor.check_python("hooks python", "/usr/bin/python3", version).status is status


SLURM_GID, BRIDGE_UID, SLURM_UID = 64030, 990, 64030


def facts(**changes: Any) -> SocketFacts:
    base = SocketFacts(
        path="/run/slurm-k8s-bridge/bridge.sock",
        mode=0o660,
        group=None,
        group_exists=True,
        directory=Owner(BRIDGE_UID, SLURM_GID, 0o750),
        socket=Owner(BRIDGE_UID, SLURM_GID, 0o660),
        expected=Owner(BRIDGE_UID, SLURM_GID, 0o660),
        slurm_user="slurm",
        slurm_uid=SLURM_UID,
        slurm_gids=frozenset({SLURM_GID}),
    )
    return SocketFacts(**{**base.__dict__, **changes})


@pytest.mark.parametrize(
    ("changes", "status", "text"),
    [
        ({}, Status.PASS, "SlurmUser slurm may connect"),
        ({"socket": None}, Status.PASS, "bridge not running"),
        (
            {"slurm_uid": 0, "slurm_user": "root", "socket": Owner(0, 0, 0o600)},
            Status.WARN,
            "mode 0600, configured 0660",
        ),
        ({"group": "hpc", "group_exists": False}, Status.FAIL, "socket_group hpc is not a group"),
        ({"slurm_uid": None}, Status.FAIL, "not a user on this host"),
        ({"directory": None}, Status.WARN, "does not exist yet"),
        ({"directory": Owner(BRIDGE_UID, 0, 0o700)}, Status.FAIL, "cannot enter"),
        ({"socket": Owner(BRIDGE_UID, 0, 0o660)}, Status.FAIL, "may not connect"),
        ({"socket": Owner(BRIDGE_UID, SLURM_GID, 0o640)}, Status.FAIL, "may not connect"),
        ({"socket": Owner(SLURM_UID, 0, 0o600), "mode": 0o600}, Status.PASS, "may connect"),
    ],
)
def test_socket(changes: dict[str, Any], status: Status, text: str) -> None:
    check = doctor.check_socket(facts(**changes))
    assert check.status is status, check.line()
    assert text in check.line()


def test_name_resolution_is_a_warning_only() -> None:
    assert doctor.check_name("cpu", "cpu-0", ["10.0.0.1"], "").status is Status.PASS
    warn = doctor.check_name("cpu", "cpu-0", [], "Name or service not known")
    assert warn.status is Status.WARN
    assert "cpu-0 does not resolve" in warn.cause


@pytest.mark.parametrize(
    ("tried", "status"),
    [
        ({}, Status.SKIP),
        ({"cpu-0": ""}, Status.PASS),
        ({"sim-0": "10.9.0.1: timed out", "cpu-0": ""}, Status.PASS),
        ({"sim-0": "10.9.0.1: timed out"}, Status.WARN),
    ],
)
def test_route(tried: dict[str, str], status: Status) -> None:
    assert doctor.check_route(tried).status is status


def test_summary_and_failed() -> None:
    checks = [Check(Status.PASS, "a", ""), Check(Status.WARN, "b", ""), Check(Status.PASS, "c", "")]
    assert doctor.summary(checks) == "2 pass, 1 warn"
    assert not doctor.failed(checks)
    assert doctor.failed([*checks, Check(Status.FAIL, "d", "")])


SHOW_CONFIG = """Configuration data as of 2026-12-03T08:31:14
AccountingStorageHost   = localhost
ResumeProgram           = /opt/skb/hooks/resume
RebootProgram           = (null)
SuspendTime             = 20 sec

Cgroup Support Configuration:
ResumeProgram           = /elsewhere

Slurmctld(primary) at vm is UP
"""


def test_parse_show_config() -> None:
    settings = parse_show_config(SHOW_CONFIG)
    assert settings["ResumeProgram"] == "/opt/skb/hooks/resume"
    assert settings["RebootProgram"] == ""
    assert settings["SuspendTime"] == "20 sec"
    assert "Slurmctld(primary) at vm is UP" not in settings


def test_doctor_with_a_broken_config_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text("pools: []\n")
    assert main(["doctor", "-c", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  config: {path}")
    assert "doctor: 1 fail" in out


SECRET_RULE = {
    "verbs": ["get"],
    "apiGroups": [""],
    "resources": ["secrets"],
    "resourceNames": ["slurm-munge-key"],
}


@pytest.mark.parametrize(
    ("rules", "names"),
    [
        ([POD_RULE, SECRET_RULE], ["slurm-munge-key"]),
        ([POD_RULE], []),
        ([SECRET_RULE, {**SECRET_RULE, "resourceNames": []}], []),  # any name: no list
        (
            [SECRET_RULE, {**SECRET_RULE, "resourceNames": ["b", "slurm-munge-key"]}],
            ["slurm-munge-key", "b"],
        ),
    ],
)
def test_readable_names(rules: list[Mapping[str, Any]], names: list[str]) -> None:
    assert doctor.readable_names(rules, "secrets") == names


def test_a_secret_the_role_does_not_name_fails_naming_both() -> None:
    check = doctor.check_object(
        "Secret", "other-key", "slurm", None, "create it", readable=["slurm-munge-key"]
    )
    assert check.status is Status.FAIL
    assert "Secret other-key is not one these credentials may read" in check.cause
    assert "slurm-munge-key" in check.cause


# --- the service the doctor's advice points at (systemd-analyze verify accepts it too) ----------

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "slurm-k8s-bridge.service"


def test_the_systemd_unit_runs_serve_as_its_user_with_a_socket_directory() -> None:
    import configparser  # noqa: PLC0415

    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(UNIT)
    service = unit["Service"]
    assert service["User"] == "slurm-k8s-bridge"
    assert service["ExecStart"].endswith(
        "/bin/slurm-k8s-bridge serve -c /etc/slurm-k8s-bridge/bridge.yaml"
    )
    assert service["RuntimeDirectory"] == "slurm-k8s-bridge"
    assert service["RuntimeDirectoryMode"] == "0750"
    assert service["Restart"] == "on-failure"
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert service["RestrictAddressFamilies"].split() == [
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
        "AF_NETLINK",
    ]
    assert service["SystemCallFilter"] == "@system-service"


NODE_LIST_RULE = {"verbs": ["list"], "apiGroups": [""], "resources": ["nodes"]}


@pytest.mark.parametrize(
    ("rules", "status", "text"),
    [
        ([POD_RULE, NODE_LIST_RULE], Status.PASS, "x may list nodes (cordon handling on)"),
        ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], Status.PASS, "may list"),
        (
            [POD_RULE],
            Status.WARN,
            "x may not list nodes (cluster-wide): cordoned Kubernetes nodes will not drain",
        ),
        ([{**NODE_LIST_RULE, "verbs": ["get"]}], Status.WARN, "may not list nodes"),
    ],
)
def test_cordon_access_is_a_warning(
    rules: list[Mapping[str, Any]], status: Status, text: str
) -> None:
    check = doctor.check_cordon_access(doctor.missing_access(rules, doctor.CORDON_ACCESS), "x")
    assert check.status is status
    assert text in check.line()
    if status is Status.WARN:
        assert "ClusterRole slurm-k8s-bridge-nodes" in check.line()


# --- gang scheduling: the mode, and the PodGroup rights when it is on ---------------------------

PODGROUP_RULE = {
    "verbs": ["create", "get", "list", "patch", "delete"],
    "apiGroups": ["scheduling.k8s.io"],
    "resources": ["podgroups"],
}
ON = GangMode(api_version="scheduling.k8s.io/v1beta1")


@pytest.mark.parametrize(
    ("rules", "missing"),
    [
        ([PODGROUP_RULE], []),
        ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], []),
        (
            [{**PODGROUP_RULE, "verbs": ["create", "list"]}],
            ["patch podgroups", "delete podgroups"],
        ),
        # The core group has no podgroups: a rule there grants nothing.
        (
            [{**PODGROUP_RULE, "apiGroups": [""]}],
            ["create podgroups", "list podgroups", "patch podgroups", "delete podgroups"],
        ),
        ([POD_RULE], ["create podgroups", "list podgroups", "patch podgroups", "delete podgroups"]),
    ],
    ids=["granted", "cluster-admin", "partly", "wrong-group", "none"],
)
def test_pod_group_access_is_read_in_its_api_group(
    rules: list[Mapping[str, Any]], missing: list[str]
) -> None:
    assert (
        doctor.missing_access(rules, doctor.POD_GROUP_ACCESS, group="scheduling.k8s.io") == missing
    )


@pytest.mark.parametrize(
    ("mode", "missing", "unknown", "status", "line"),
    [
        (
            ON,
            [],
            "",
            Status.PASS,
            "PASS  gang scheduling: on (scheduling.k8s.io/v1beta1 PodGroup); x may create, list, "
            "patch, delete podgroups",
        ),
        (
            ON,
            ["patch podgroups", "delete podgroups"],
            "",
            Status.WARN,
            "WARN  gang scheduling: on (scheduling.k8s.io/v1beta1 PodGroup), but x may not patch "
            "podgroups, delete podgroups (scheduling.k8s.io): a multi-node job's pods are then "
            "placed one by one -> grant patch podgroups, delete podgroups on scheduling.k8s.io "
            "podgroups (apply the Role of deploy/kustomize/base/rbac.yaml to these "
            "credentials), or set kubernetes.gang_scheduling: off",
        ),
        (
            GangMode(why_off="the API server serves no PodGroup API"),
            [],
            "",
            Status.SKIP,
            "SKIP  gang scheduling: off: the API server serves no PodGroup API; a multi-node "
            "job's pods are placed one by one (job-aware failure)",
        ),
        (
            GANG_MODE_OFF,
            [],
            "",
            Status.SKIP,
            "SKIP  gang scheduling: off: kubernetes.gang_scheduling is off; a multi-node job's "
            "pods are placed one by one (job-aware failure)",
        ),
        (
            GangMode(why_off="the PodGroup API could not be discovered (HTTP 503)"),
            [],
            "HTTP 503",
            Status.WARN,
            "WARN  gang scheduling: off: the PodGroup API could not be discovered (HTTP 503); a "
            "multi-node job's pods are placed one by one (job-aware failure) -> check the API "
            "server",
        ),
    ],
    ids=["on", "on-without-rights", "not-served", "configured-off", "discovery-failed"],
)
def test_gang_scheduling_check(
    mode: GangMode, missing: list[str], unknown: str, status: Status, line: str
) -> None:
    check = doctor.check_gang_scheduling(mode, missing, "x", unknown=unknown)
    assert check.status is status
    assert check.line() == line


# --- the key Secret the pods mount, missing (issue 28 item 3.5) ---------------------------------


@pytest.mark.parametrize(
    ("slurm", "secret", "command"),
    [
        (
            SlurmSettings(),
            "slurm-munge-key",
            "kubectl -n hpc create secret generic slurm-munge-key "
            "--from-file=munge.key=/etc/munge/munge.key",
        ),
        (
            SlurmSettings(munge_key_secret="site-munge"),  # noqa: S106
            "site-munge",
            "kubectl -n hpc create secret generic site-munge "
            "--from-file=munge.key=/etc/munge/munge.key",
        ),
        (
            SlurmSettings(auth="slurm"),
            "slurm-key",
            "kubectl -n hpc create secret generic slurm-key "
            "--from-file=slurm.key=/etc/slurm/slurm.key",
        ),
    ],
)
def test_a_missing_key_secret_fails_naming_it_and_how_to_make_it(
    slurm: SlurmSettings, secret: str, command: str
) -> None:
    name, fix = doctor.key_secret(slurm, "hpc")
    check = doctor.check_object("Secret", name, "hpc", False, fix)
    assert check.status is Status.FAIL
    assert check.line().startswith(
        f"FAIL  secret {secret}: Secret {secret} not found in namespace hpc -> create it from "
    )
    assert check.line().endswith(command)


# --- Slurm write rights --------------------------------------------------------------------------

#: What 26.05's scontrol printed to a no-op comment update as uid 65534 (slurmctld logged
#: "error: Security violation, UPDATE_NODE RPC from uid=65534"); 22.05 and 24.11 use the same code.
REFUSED = BackendError(
    "scontrol update nodename=cpu-3 comment=: exit status 1: slurm_update error: Invalid user id"
)


def slurm_node(name: str, state: str = "IDLE", *flags: str, comment: str = "") -> SlurmNode:
    return SlurmNode(name=name, state=state, flags=frozenset({"CLOUD", *flags}), comment=comment)


@pytest.mark.parametrize(
    ("nodes", "chosen"),
    [
        # A powered-down node with no comment: the bridge writes nothing there meanwhile.
        (
            [
                slurm_node("cpu-0", "ALLOCATED", comment="k8s: pod cpu-0 on n1"),
                slurm_node("cpu-1", "IDLE", "POWERED_DOWN", comment="admin: flaky"),
                slurm_node("cpu-2", "IDLE", "POWERED_DOWN"),
            ],
            "cpu-2",
        ),
        (
            [
                slurm_node("cpu-0", "ALLOCATED", comment="k8s: pod cpu-0 on n1"),
                slurm_node("cpu-1", "IDLE", "POWERED_DOWN", comment="admin: flaky"),
            ],
            "cpu-1",
        ),
        ([slurm_node("cpu-0", "ALLOCATED"), slurm_node("cpu-1", "IDLE")], "cpu-1"),
        # Nodes outside the pools are never written.
        ([slurm_node("login", "IDLE", "POWERED_DOWN"), slurm_node("cpu-1", "MIXED")], "cpu-1"),
        ([slurm_node("login", "IDLE", "POWERED_DOWN")], None),
        ([], None),
    ],
)
def test_the_write_goes_to_a_quiet_pool_node(nodes: list[SlurmNode], chosen: str | None) -> None:
    node = doctor.write_probe_node(nodes, ["cpu-0", "cpu-1", "cpu-2"])
    assert (node.name if node else None) == chosen


@pytest.mark.parametrize(
    ("node", "error", "status", "text"),
    [
        (slurm_node("cpu-3"), None, Status.PASS, "user skb may update nodes"),
        (
            slurm_node("cpu-3"),
            REFUSED,
            Status.FAIL,
            "FAIL  slurm writes: the bridge's user skb may not update nodes: slurmctld refused "
            "a no-op `scontrol update nodename=cpu-3 comment=<its comment>`: scontrol update "
            "nodename=cpu-3 comment=: exit status 1: slurm_update error: Invalid user id -> "
            "grant it AdminLevel=Admin with `sacctmgr modify user skb set adminlevel=Admin` "
            "(needs slurmdbd), or run the bridge as SlurmUser slurm",
        ),
        (
            slurm_node("cpu-3"),
            BackendError("scontrol update ...: slurm_update error: Access/permission denied"),
            Status.FAIL,
            "may not update nodes",
        ),
        (
            slurm_node("cpu-3"),
            TransientBackendError("scontrol update ...: Unable to contact slurm controller"),
            Status.WARN,
            "cannot tell whether user skb may update nodes",
        ),
        (
            slurm_node("cpu-3"),
            InvalidInput("scontrol update ...: Invalid node name specified"),
            Status.WARN,
            "failed: scontrol update ...: Invalid node name specified",
        ),
        (None, None, Status.SKIP, "no pool node known to Slurm"),
    ],
)
def test_slurm_write_rights(
    node: SlurmNode | None, error: BridgeError | None, status: Status, text: str
) -> None:
    check = doctor.check_slurm_write(node, "skb", "slurm", error)
    assert check.status is status
    assert text in check.line()


# --- image references and the slurmd image's Slurm series ----------------------------------------


@pytest.mark.parametrize(
    ("reference", "parsed"),
    [
        ("localhost/slurm-k8s-bridge/slurmd:dev", ("localhost/slurm-k8s-bridge/slurmd", "dev", "")),
        ("slurmd", ("slurmd", "", "")),
        (
            "registry.example.org:5000/hpc/slurmd:24.11-0.1.0",
            ("registry.example.org:5000/hpc/slurmd", "24.11-0.1.0", ""),
        ),
        (
            "ghcr.io/slinkyproject/slurmd:25.05-ubuntu24.04@sha256:" + "a" * 64,
            ("ghcr.io/slinkyproject/slurmd", "25.05-ubuntu24.04", "sha256:" + "a" * 64),
        ),
        ("[::1]:5000/slurmd:x", ("[::1]:5000/slurmd", "x", "")),
        # What a kubelet refuses (InvalidImageName), though the API server admits it.
        ("localhost/slurm-k8s-bridge/Slurmd:dev", None),
        ("slurmd:BAD NAME", None),
        ("slurmd:-dev", None),
        ("slurmd@sha256:abc", None),
        ("slurmd:", None),
        ("/slurmd", None),
        ("", None),
    ],
)
def test_parse_image_reference(reference: str, parsed: tuple[str, str, str] | None) -> None:
    result = doctor.parse_image_reference(reference)
    assert (None if result is None else (result.name, result.tag, result.digest)) == parsed


@pytest.mark.parametrize(
    ("image", "series"),
    [
        ("localhost/slurm-k8s-bridge/slurmd:24.11-0.1.0", "24.11"),  # make image's release tag
        ("localhost/slurm-k8s-bridge/slurmd:26.05", "26.05"),  # and its moving series tag
        ("registry.example.org/hpc/slurmd:22.05.8-1", "22.05"),
        ("ghcr.io/slinkyproject/slurmd:25.05-ubuntu24.04", "25.05"),  # 24.04 is no Slurm release
        ("site/slurm:slurm-23.11.10-rocky9", "23.11"),
        ("localhost/slurm-k8s-bridge/slurmd:dev", ""),
        ("slurmd", ""),
        ("site/slurmd:2024.11", ""),
        ("site/slurmd:24.115", ""),
        ("site/slurmd:25.02", ""),  # no such release
        ("site/slurmd:24.11-to-25.05", ""),  # two series: cannot tell
        ("slurmd-24.11:latest", ""),  # only the tag is read
        ("Slurmd:24.11", ""),  # not an image reference at all
    ],
)
def test_image_series_is_read_from_the_tag(image: str, series: str) -> None:
    assert doctor.image_series(image) == series


@pytest.mark.parametrize(
    ("series", "index"),
    [
        ("22.05", 7),
        ("23.02", 8),
        ("23.11", 9),
        ("24.05", 10),
        ("24.11", 11),
        ("25.05", 12),
        ("25.11", 13),
        ("26.05", 14),
        ("27.11", 17),
        ("24.08", None),
        ("23.05", None),
        ("26", None),
        ("", None),
    ],
)
def test_release_index(series: str, index: int | None) -> None:
    assert doctor.release_index(series) == index


@pytest.mark.parametrize(
    ("controller", "window"),
    [("22.05", 2), ("23.11", 2), ("24.05", 2), ("24.11", 3), ("26.05", 3), ("", 2)],
)
def test_slurmctld_accepts_two_older_releases_three_from_24_11(
    controller: str, window: int
) -> None:
    assert doctor.accepted_older_releases(controller) == window


@pytest.mark.parametrize(
    ("version", "series"),
    [("26.05.5", "26.05"), ("22.05.8", "22.05"), ("24.11.0-0rc1", "24.11"), ("", ""), ("x", "")],
)
def test_series_of_version(version: str, series: str) -> None:
    assert doctor.series_of_version(version) == series


IMAGE = "localhost/slurm-k8s-bridge/slurmd"


@pytest.mark.parametrize(
    ("tag", "controller", "status", "text"),
    [
        ("26.05-0.1.0", "26.05", Status.PASS, "Slurm 26.05, as slurmctld"),
        ("22.05", "22.05", Status.PASS, "as slurmctld"),
        # Never newer than slurmctld.
        ("26.05", "24.11", Status.FAIL, "slurmd 26.05 is newer than slurmctld 24.11"),
        ("23.02", "22.05", Status.FAIL, "newer than slurmctld 22.05"),
        # 24.11 accepts 23.02 (three back), not 22.05 (deploy/images/slurmd/README.md).
        ("23.02", "24.11", Status.WARN, "3 releases older than slurmctld 24.11"),
        ("22.05", "24.11", Status.FAIL, "4 releases older than slurmctld 24.11, which accepts"),
        ("22.05", "26.05", Status.FAIL, "7 releases older"),
        ("24.11", "26.05", Status.WARN, "(Slurm accepts up to 3)"),
        ("25.11", "26.05", Status.WARN, "1 release older than slurmctld 26.05"),
        # Before 24.11, two.
        ("21.08", "22.05", Status.WARN, "(Slurm accepts up to 2)"),
        # 22.05's release notes: "can be upgraded from version 20.11 or 21.08".
        ("20.11", "22.05", Status.WARN, "2 releases older"),
        ("20.02", "22.05", Status.FAIL, "3 releases older than slurmctld 22.05, which accepts"),
        # What a site's tag may not say: a warning that says how to look.
        ("dev", "26.05", Status.WARN, "names no Slurm series, so doctor cannot tell"),
        ("26.05", "", Status.WARN, "cannot tell slurmctld's series"),
    ],
)
def test_slurmd_series(tag: str, controller: str, status: Status, text: str) -> None:
    check = doctor.check_slurmd_series(f"{IMAGE}:{tag}", ["cpu", "big"], controller)
    assert check.status is status, check.line()
    assert text in check.line()
    assert check.line().startswith(f"{status.value}  slurmd series {IMAGE}:{tag}: pools cpu, big")
    if status is Status.FAIL:
        assert (
            check.fix
            == f"use a slurmd image of Slurm {controller} (`make image SLURM={controller}`)"
        )
    if "no Slurm series" in text:
        assert f"podman run --rm --entrypoint slurmd {IMAGE}:{tag} -V" in check.fix
        assert "it must say 26.05, or one of the 3 releases before it" in check.fix


# --- the pools' pods: image names and a server-side dry run --------------------------------------


def test_image_names_a_kubelet_refuses_fail() -> None:
    assert doctor.check_image_names("cpu", [f"{IMAGE}:dev", "busybox"]) is None
    check = doctor.check_image_names("cpu", [f"{IMAGE}:dev", "Site/Sidecar:1"])
    assert check is not None
    assert check.status is Status.FAIL
    assert "'Site/Sidecar:1' is not a valid image reference" in check.cause
    assert "InvalidImageName" in check.cause


def test_pod_images_and_the_slurmd_image() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox:1"}],
            "containers": [
                {"name": "sidecar", "image": "exporter:2"},
                {"name": "slurmd", "image": f"{IMAGE}:26.05"},
            ],
        }
    }
    assert doctor.pod_images(pod) == ["busybox:1", "exporter:2", f"{IMAGE}:26.05"]
    assert doctor.slurmd_image(pod) == f"{IMAGE}:26.05"


#: The messages the proving ground's API server (v1.34.4) gave to dry-run creates.
ALLOW_LIST_REFUSAL = (
    'dry-run create pod cpu-0: forbidden: pods "cpu-0" is forbidden: ValidatingAdmissionPolicy '
    "'slurm-k8s-bridge-pods' with binding 'slurm-k8s-bridge-pods' denied request: "
    "slurm-k8s-bridge-pods: image(s) not in the allow-list (annotation "
    "slurm-k8s-bridge.io/allowed-images of namespace slurm): docker.io/evil:1"
)


@pytest.mark.parametrize(
    ("error", "exists", "status", "cause", "fix"),
    [
        (None, False, Status.PASS, "the pod of cpu-0 would be created", ""),
        (None, True, Status.PASS, "passed admission (a pod of that name exists)", ""),
        (
            Forbidden(ALLOW_LIST_REFUSAL),
            False,
            Status.FAIL,
            "image(s) not in the allow-list",
            "add the image (or a prefix ending in *) to the annotation "
            "slurm-k8s-bridge.io/allowed-images of namespace slurm "
            "(deploy/kustomize/namespace/namespace.yaml)",
        ),
        (
            Forbidden(
                "dry-run create pod cpu-0: forbidden: ... hostPath volume(s) not in the "
                "allow-list (annotation slurm-k8s-bridge.io/allowed-host-paths of namespace "
                "slurm): /scratch"
            ),
            False,
            Status.FAIL,
            "/scratch",
            "add the path to the annotation slurm-k8s-bridge.io/allowed-host-paths",
        ),
        (
            Forbidden(
                "dry-run create pod cpu-0: forbidden: ... pod option(s) not allowed (annotation "
                "slurm-k8s-bridge.io/allowed-pod-options of namespace slurm): privileged"
            ),
            False,
            Status.FAIL,
            "): privileged",
            "add what it names to the annotation slurm-k8s-bridge.io/allowed-pod-options of "
            "namespace slurm",
        ),
        (
            Forbidden(
                'dry-run create pod cpu-0: forbidden: pods "cpu-0" is forbidden: violates '
                'PodSecurity "baseline:latest": privileged (container "slurmd" must not set '
                "securityContext.privileged=true)"
            ),
            False,
            Status.FAIL,
            "violates PodSecurity",
            "label namespace slurm pod-security.kubernetes.io/enforce=privileged",
        ),
        (
            Forbidden(
                'dry-run create pod cpu-0: forbidden: pods is forbidden: User "system:'
                'serviceaccount:slurm:slurm-k8s-bridge" cannot create resource "pods" in API '
                'group "" in the namespace "slurm"'
            ),
            False,
            Status.FAIL,
            "cannot create resource",
            "grant create pods in slurm (apply the Role of deploy/kustomize/base/rbac.yaml",
        ),
        (
            NoCapacity(
                'dry-run create pod cpu-0: pods "cpu-0" is forbidden: exceeded quota: q, '
                "requested: requests.cpu=2, used: requests.cpu=9, limited: requests.cpu=10"
            ),
            False,
            Status.FAIL,
            "is refused by a ResourceQuota: ",
            "raise the ResourceQuota of namespace slurm",
        ),
        (
            Forbidden(
                'dry-run create pod cpu-0: forbidden: pods "cpu-0" is forbidden: failed quota: '
                "q: must specify limits.cpu for: slurmd"
            ),
            False,
            Status.FAIL,
            "ResourceQuota",
            "fit the pool's requests and limits",
        ),
        (
            Forbidden("dry-run create pod cpu-0: forbidden: admission webhook denied it"),
            False,
            Status.FAIL,
            "admission webhook denied it",
            "an admission webhook or policy of the cluster refuses the pod",
        ),
        (
            InvalidInput(
                'dry-run create pod cpu-0: rejected by the API server: Pod "cpu-0" is '
                "invalid: spec.containers[0].resources.requests: Invalid value"
            ),
            False,
            Status.FAIL,
            "is rejected as invalid",
            "fix the pool's pod_template",
        ),
        (
            TransientBackendError("dry-run create pod cpu-0: HTTP 503: unavailable"),
            False,
            Status.WARN,
            "the dry run did not get an answer",
            "run doctor again",
        ),
    ],
)
def test_pod_admission(
    error: BridgeError | None, exists: bool, status: Status, cause: str, fix: str
) -> None:
    check = doctor.check_pod_admission("cpu", "cpu-0", "slurm", error, exists)
    assert check.status is status, check.line()
    assert check.name == "pod cpu"
    assert check.cause.startswith("pool cpu: the pod of cpu-0")
    assert cause in check.cause
    assert fix in check.fix


@pytest.mark.parametrize(
    ("clashes", "error", "status", "said"),
    [
        ([], "", Status.PASS, "no pool reuses a name /etc/slurm/slurm.conf defines"),
        (
            ["pool cpu: partition cpu is already defined in /etc/slurm/slurm.conf"],
            "",
            Status.FAIL,
            "pool cpu: partition cpu is already defined in /etc/slurm/slurm.conf (slurmctld",
        ),
        ([], "cannot read /etc/slurm/slurm.conf (Permission denied)", Status.WARN, "not compared"),
    ],
)
def test_site_names_fail_on_a_name_the_site_defines(
    clashes: list[str], error: str, status: Status, said: str
) -> None:
    check = doctor.check_site_names("/etc/slurm/slurm.conf", clashes, error)
    assert check.status is status
    assert check.cause.startswith(said), check.cause


@pytest.mark.parametrize(
    ("missing", "error", "status", "said"),
    [
        ([], "", Status.PASS, "SlurmctldParameters (and GresTypes) hold the bridge's entries"),
        (
            ["SlurmctldParameters: lacks idle_on_node_suspend (running: enable_configless); add"],
            "",
            Status.FAIL,
            "SlurmctldParameters: lacks idle_on_node_suspend",
        ),
        ([], "slurm_version: no version in ''", Status.WARN, "not compared: slurm_version"),
    ],
)
def test_list_globals_fail_while_the_site_s_line_lacks_an_entry(
    missing: list[str], error: str, status: Status, said: str
) -> None:
    check = doctor.check_list_globals(missing, error)
    assert check.status is status
    assert check.cause.startswith(said), check.cause


@pytest.mark.parametrize(
    ("handed", "problems", "unhanded", "status", "said"),
    [
        ({}, [], [], Status.PASS, "none configured"),
        (
            {"SKB_SITE_RESUME_PROGRAM": "/opt/ipmi/on"},
            [],
            [],
            Status.PASS,
            "nodes no pool owns go to SKB_SITE_RESUME_PROGRAM=/opt/ipmi/on",
        ),
        (
            {"SKB_SITE_RESUME_PROGRAM": "ipmi-on"},
            ["SKB_SITE_RESUME_PROGRAM: ipmi-on is not an absolute path"],
            [],
            Status.FAIL,
            "SKB_SITE_RESUME_PROGRAM: ipmi-on is not an absolute path",
        ),
        (
            {},
            [],
            ["the site's SuspendProgram=/opt/ipmi/off is replaced by /x/suspend, not handed off"],
            Status.FAIL,
            "the site's SuspendProgram=/opt/ipmi/off",
        ),
    ],
)
def test_site_hand_off(
    handed: dict[str, str], problems: list[str], unhanded: list[str], status: Status, said: str
) -> None:
    check = doctor.check_site_handoff("/etc/slurm-k8s-bridge/hooks.env", handed, problems, unhanded)
    assert check.status is status
    assert check.cause.startswith(said), check.cause
