"""The doctor's decisions, as tables: RBAC rules → missing verbs, objects, Slurm, hooks, Python,
socket permissions, name resolution and routes; and the subcommand's exit status."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge import doctor
from bridge.adapters.slurm.cli import parse_show_config
from bridge.cli.main import main
from bridge.doctor import Check, Owner, SocketFacts, Status
from bridge.domain.nodes import SlurmNode
from bridge.settings import SlurmSettings

POD_RULE = {
    "verbs": ["get", "list", "watch", "create", "delete", "patch"],
    "apiGroups": [""],
    "resources": ["pods"],
}
POD_STATUS_RULE = {"verbs": ["patch"], "apiGroups": [""], "resources": ["pods/status"]}
EVENT_RULE = {
    "verbs": ["create", "patch", "list"],
    "apiGroups": ["", "events.k8s.io"],
    "resources": ["events"],
}
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


@pytest.mark.parametrize(
    ("hooks_env", "venv", "python"),
    [
        ("SKB_PYTHON=/opt/skb/venv/bin/python\n", True, "/opt/skb/venv/bin/python"),
        ('# x\nSKB_PYTHON="/opt/q/python"\n', False, "/opt/q/python"),
        (None, True, "/repo/.venv/bin/python"),
        ("SKB_SOCKET=unix:/x\n", False, "/usr/bin/python3"),
    ],
)
def test_hook_python_found_as_hook_sh_finds_it(
    hooks_env: str | None, venv: bool, python: str
) -> None:
    assert doctor.hook_python("/repo/slurm_plugins/resume", hooks_env, venv) == python


def test_python_version_from_a_venv(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.9.18\n")
    assert doctor.python_version(str(tmp_path / "bin" / "python")) == (3, 9)
    (tmp_path / "bin" / "python3.12").write_text("")
    assert doctor.python_version(str(tmp_path / "bin" / "python3.12")) == (3, 12)
    assert doctor.python_version(str(tmp_path / "nothing")) is None


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
