"""``slurm-k8s-bridge doctor`` against the proving ground: it passes with the ground's bridge
configuration and credentials, and fails with a named cause when the munge key Secret is missing
and when the credentials lack ``create pods``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from proving_ground.bridge_daemon import bridge_env
from proving_ground.layout import APISERVER_PORT

from tests.conftest import ROOT, ProvingGround

pytestmark = pytest.mark.integration

CONFIG = ROOT / "dev" / "bridge.yaml"
RBAC = ROOT / "deploy" / "kustomize" / "base" / "rbac.yaml"
THROWAWAY = "skb-doctor-test"


def doctor(pg: ProvingGround, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "slurm-k8s-bridge"), "doctor", "-c", str(CONFIG)],
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
    lacks ``get`` on the Secret and the Service); the file's rules are a superset of its own."""
    role = next(doc for doc in RBAC.read_text().split("---") if "kind: Role\n" in doc)
    path = tmp_path_factory.mktemp("rbac") / "role.yaml"
    path.write_text(role)
    proving_ground.kubectl("-n", "slurm", "apply", "-f", str(path))
    return proving_ground


def test_doctor_passes_on_the_proving_ground(ground_role: ProvingGround) -> None:
    result = doctor(ground_role)
    assert result.returncode == 0, result.stdout
    assert not lines(result, "FAIL")
    for check in ("credentials", "rbac", "secret slurm-munge-key", "service slurm-nodes", "slurm"):
        assert any(line.startswith(f"PASS  {check}:") for line in result.stdout.splitlines()), check
    for key in ("ResumeProgram", "SuspendProgram", "ResumeFailProgram", "socket"):
        assert f"PASS  {key}:" in result.stdout


def test_doctor_fails_naming_a_secret_that_is_not_there(ground_role: ProvingGround) -> None:
    result = doctor(ground_role, SKB_SLURM_MUNGE_KEY_SECRET="skb-no-such-key")  # noqa: S106
    assert result.returncode == 1
    (failure,) = lines(result, "FAIL")
    assert failure.startswith("FAIL  secret skb-no-such-key: Secret skb-no-such-key ")


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
