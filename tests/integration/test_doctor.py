"""``slurm-k8s-bridge doctor`` against the proving ground: it passes with the ground's bridge
configuration and credentials (the slurmd image's series is a warning: ``slurmd:dev`` names
none), and fails with a named cause when the key Secret is missing, when the credentials lack
``create pods``, when a pool's image is not on the namespace's allow-list or of a Slurm series
slurmctld refuses, and when its Slurm commands run as a user who may not update nodes.

Nothing here changes the ground: the dry runs store nothing, the write check sets a Comment to
what it is, and the refused write changes nothing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from proving_ground.bridge_daemon import bridge_env
from proving_ground.layout import APISERVER_PORT
from proving_ground.slurm import ground_programs

from tests.conftest import ROOT, ProvingGround

pytestmark = pytest.mark.integration

CONFIG = ROOT / "dev" / "bridge.yaml"
RBAC = ROOT / "deploy" / "kustomize" / "base" / "rbac.yaml"
THROWAWAY = "skb-doctor-test"


def doctor(
    pg: ProvingGround, config: Path = CONFIG, **env: str
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "slurm-k8s-bridge"), "doctor", "-c", str(config)],
        env={**bridge_env(pg.layout), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(result.stdout, result.stderr)
    return result


def lines(result: subprocess.CompletedProcess[str], status: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(status)]


@pytest.fixture(scope="module")
def ground_role(
    proving_ground: ProvingGround, tmp_path_factory: pytest.TempPathFactory
) -> ProvingGround:
    """The ground's Role with this checkout's rules (a ground started before the doctor existed
    lacks ``get`` on the Service); the file's rules are what the checkout needs."""
    role = next(doc for doc in RBAC.read_text().split("---") if "kind: Role\n" in doc)
    path = tmp_path_factory.mktemp("rbac") / "role.yaml"
    path.write_text(role)
    proving_ground.kubectl("-n", "slurm", "apply", "-f", str(path))
    return proving_ground


#: The pools of the ground's configuration: one dry-run create each.
POOLS = [pool["name"] for pool in yaml.safe_load(CONFIG.read_text())["pools"]]
#: Not failures, and expected here: ``slurmd:dev`` and ``:does-not-exist`` name no series;
#: running kwok pods have IPs nothing routes to.
ALLOWED_WARNINGS = (
    "WARN  slurmd series localhost/slurm-k8s-bridge/slurmd:",
    "WARN  route to pods:",
    # The Role may not read the key Secret, by design (docs/security.md).
    "WARN  secret slurm-munge-key: cannot tell whether",
    "WARN  secret slurm-key: cannot tell whether",
)


def test_doctor_passes_on_the_proving_ground(ground_role: ProvingGround) -> None:
    result = doctor(ground_role)
    assert result.returncode == 0, result.stdout
    assert not lines(result, "FAIL")
    checks = ["credentials", "rbac", "service slurm-nodes", "slurm", "site names"]
    checks += ["list globals", "site hand-off"]
    checks += ["slurm writes", "hooks python", *(f"pod {pool}" for pool in POOLS)]
    secret = "slurm-key" if ground_role.auth == "slurm" else "slurm-munge-key"
    assert "the bridge may not read Secrets (docs/security.md)" in result.stdout
    assert f"kubectl -n slurm get secret {secret}" in result.stdout
    for check in checks:
        assert any(line.startswith(f"PASS  {check}:") for line in result.stdout.splitlines()), check
    for key in ("ResumeProgram", "SuspendProgram", "ResumeFailProgram", "socket"):
        assert f"PASS  {key}:" in result.stdout
    # The ground's hooks run inside Slurm's root, which has no Python: the Go client.
    assert "PASS  hooks python: not needed: " in result.stdout
    assert "runs the Go client" in result.stdout
    for line in lines(result, "WARN"):
        assert line.startswith(ALLOWED_WARNINGS), line
    # What doctor cannot know from slurmd:dev, it says, and how to look.
    assert "names no Slurm series" in result.stdout
    assert f"slurmctld runs {ground_role.series}" in result.stdout


def config_with(tmp_path: Path, **pool: Any) -> Path:
    """The ground's configuration with only its ``cpu`` pool, changed as given."""
    data = yaml.safe_load(CONFIG.read_text())
    cpu = next(p for p in data["pools"] if p["name"] == "cpu")
    data["pools"] = [{**cpu, **pool}]
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def only_failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout
    (failure,) = lines(result, "FAIL")
    return failure


def test_doctor_cannot_tell_about_a_secret_the_bridge_may_not_read(
    ground_role: ProvingGround,
) -> None:
    """Issue 31 item 2: the Role no longer reads the key Secret (that handed the key to whoever
    holds the bridge's token). A Secret the configuration names, there or not, is one doctor
    cannot tell about: it says so and how an administrator looks, and never passes it. (A Role
    that may read it still gets the 404: test_doctor_fails_naming_create_pods.)"""
    key = "SLURM_KEY_SECRET" if ground_role.auth == "slurm" else "MUNGE_KEY_SECRET"
    result = doctor(ground_role, **{f"SKB_SLURM_{key}": "skb-no-such-key"})
    # Not a failure of the secret check: a warning. The pods' dry runs do fail, each naming the
    # admission guard's Secret allow-list, which does not list it.
    assert result.returncode == 1, result.stdout
    failures = lines(result, "FAIL")
    assert failures, result.stdout
    for failure in failures:
        assert "slurm-k8s-bridge.io/allowed-secrets of namespace slurm): skb-no-such-key" in (
            failure
        ), failure
    (line,) = [x for x in result.stdout.splitlines() if "secret skb-no-such-key" in x]
    assert line.startswith(
        "WARN  secret skb-no-such-key: cannot tell whether Secret skb-no-such-key exists in "
        "namespace slurm: the bridge may not read Secrets (docs/security.md)"
    ), line
    assert "kubectl -n slurm get secret skb-no-such-key" in result.stdout


def test_doctor_fails_an_image_the_namespace_does_not_allow(
    ground_role: ProvingGround, tmp_path: Path
) -> None:
    image = "registry.example.org/hpc/slurmd:dev"
    failure = only_failure(doctor(ground_role, config_with(tmp_path, image=image)))
    assert failure.startswith("FAIL  pod cpu: pool cpu: the pod of cpu-"), failure
    # The namespace's admission policy said no (deploy/kustomize/namespace), and doctor says
    # where the allow-list is.
    assert (
        "image(s) not in the allow-list (annotation slurm-k8s-bridge.io/allowed-images of "
        f"namespace slurm): {image}"
    ) in failure
    assert (
        "-> add the image (or a prefix ending in *) to the annotation "
        "slurm-k8s-bridge.io/allowed-images of namespace slurm"
    ) in failure


def test_doctor_fails_a_slurmd_image_of_a_series_slurmctld_refuses(
    ground_role: ProvingGround, tmp_path: Path
) -> None:
    """An allowed image (the allow-list takes every tag of slurmd) of another series: 22.05
    is too old for 24.11 and 26.05 (they accept three releases back), 26.05 too new for 22.05.
    The image need not exist: doctor reads the series from the tag."""
    ground = ground_role.series
    other = "26.05" if ground == "22.05" else "22.05"
    image = f"localhost/slurm-k8s-bridge/slurmd:{other}-0.1.0"
    result = doctor(ground_role, config_with(tmp_path, image=image))
    failure = only_failure(result)
    assert failure.startswith(f"FAIL  slurmd series {image}: pool cpu: slurmd {other} is "), failure
    assert ("newer than" if other > ground else "releases older than") in failure
    assert f"slurmctld {ground}" in failure
    assert f"-> use a slurmd image of Slurm {ground} (`make image SLURM={ground}`)" in failure
    # The API server admits it: the series is the only fault.
    assert "PASS  pod cpu:" in result.stdout


@pytest.fixture
def scontrol_as_nobody(proving_ground: ProvingGround, tmp_path: Path) -> Path:
    """A Slurm bin directory whose scontrol runs as ``nobody`` (not root, not SlurmUser, no
    AdminLevel): the ground's clients otherwise. The series of a root runs its clients through
    enter-root, which needs root for its mount namespace, so the uid changes inside the root.
    nobody needs slurm.conf (0644 under 0755 directories) and munged's socket (0777)."""
    programs = ground_programs(proving_ground.layout)
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    runuser = ["/usr/sbin/runuser", "-u", "nobody", "--", "/usr/bin/scontrol"]
    if not programs.on_host:
        runuser = [str(programs.bin_dir / "enter-root"), *runuser]
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\nexec {" ".join(runuser)} "$@"\n')
    scontrol.chmod(0o755)
    for client in ("sinfo", "squeue"):
        (bin_dir / client).symlink_to(programs.client(client))
    bin_dir.chmod(0o755)
    return bin_dir


def test_doctor_fails_when_its_user_may_not_update_slurm_nodes(
    ground_role: ProvingGround, scontrol_as_nobody: Path
) -> None:
    """doctor names the user it runs as (root here: only its scontrol is nobody, a stand-in
    for a bridge user without rights)."""
    result = doctor(ground_role, SKB_SLURM_BIN_DIR=str(scontrol_as_nobody))
    failure = only_failure(result)
    assert failure.startswith(
        "FAIL  slurm writes: the bridge's user root may not update nodes: slurmctld refused a "
        "no-op `scontrol update nodename="
    ), failure
    assert "slurm_update error: Invalid user id" in failure
    assert (
        "-> grant it AdminLevel=Admin with `sacctmgr modify user root set adminlevel=Admin` "
        "(needs slurmdbd), or run the bridge as SlurmUser "
    ) in failure
    # Reading needs no rights: the rest of the Slurm checks pass with the same scontrol.
    assert "PASS  slurm: slurmctld answers" in result.stdout


@pytest.fixture
def limited(proving_ground: ProvingGround, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for a ServiceAccount of a throwaway namespace whose Role lacks ``create`` on
    pods (and which has no munge key Secret)."""
    pg = proving_ground
    pg.kubectl("create", "namespace", THROWAWAY)
    try:
        pg.kubectl("-n", THROWAWAY, "create", "serviceaccount", "doctor")
        pg.kubectl(
            "-n",
            THROWAWAY,
            "create",
            "role",
            "doctor",
            "--verb=get,list,watch,delete",
            "--resource=pods",
        )
        pg.kubectl(
            "-n",
            THROWAWAY,
            "create",
            "role",
            "doctor-extra",
            "--verb=create,list",
            "--resource=events",
        )
        pg.kubectl(
            "-n",
            THROWAWAY,
            "create",
            "role",
            "doctor-secret",
            "--verb=get",
            "--resource=secrets",
            "--resource-name=slurm-munge-key",
        )
        for role in ("doctor", "doctor-extra", "doctor-secret"):
            pg.kubectl(
                "-n",
                THROWAWAY,
                "create",
                "rolebinding",
                role,
                f"--role={role}",
                f"--serviceaccount={THROWAWAY}:doctor",
            )
        token = pg.kubectl("-n", THROWAWAY, "create", "token", "doctor", "--duration=10m").strip()
        kubeconfig = tmp_path / "doctor.kubeconfig"
        kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: ground
  cluster:
    certificate-authority: {pg.layout.pki / "ca.crt"}
    server: https://127.0.0.1:{APISERVER_PORT}
users:
- name: doctor
  user: {{token: {token}}}
contexts:
- name: doctor
  context: {{cluster: ground, user: doctor, namespace: {THROWAWAY}}}
current-context: doctor
""")
        kubeconfig.chmod(0o600)
        yield kubeconfig
    finally:
        pg.kubectl("delete", "namespace", THROWAWAY, "--wait=false")


def test_doctor_fails_naming_create_pods(proving_ground: ProvingGround, limited: Path) -> None:
    result = doctor(
        proving_ground,
        SKB_KUBERNETES_KUBECONFIG=str(limited),
        SKB_KUBERNETES_NAMESPACE=THROWAWAY,
    )
    assert result.returncode == 1
    failures = lines(result, "FAIL")
    assert any(
        # The verbs it lacks, all named: create pods, and patch pods and pods/status (the pods'
        # Slurm state label and registered condition).
        line.startswith("FAIL  rbac:")
        and f"may not create pods, patch pods, patch pods/status in namespace {THROWAWAY}" in line
        for line in failures
    ), failures
    # Its namespace has no munge key: a 404 this time, not a refusal.
    assert any(
        f"Secret slurm-munge-key not found in namespace {THROWAWAY}" in line for line in failures
    ), failures
