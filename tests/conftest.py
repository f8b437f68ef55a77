"""Session fixtures: the proving ground (real Slurm + Kubernetes), reused when already up."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))

from proving_ground import backup_host, ground, layout, slurm  # noqa: E402
from proving_ground.processes import State  # noqa: E402

#: The tiers, one directory each; a test's marker is its directory's name (`pytest -m unit`).
TIERS = ("unit", "tooling", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier, so a new file takes its tier from its directory."""
    tests = Path(__file__).resolve().parent
    for item in items:
        tier = item.path.resolve().relative_to(tests).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(
                f"{item.nodeid}: tests live in one of tests/{{{','.join(TIERS)}}}/"
            )
        item.add_marker(tier)


#: What a failed e2e test's report gains, so a CI failure can be read without the ground (it
#: is taken down after the run): the views the elastic cycle depends on, then the logs' tails.
_SLURM_VIEWS = (
    ("squeue", "-a", "-o", "%i %P %u %T %r %N"),
    ("sinfo", "-o", "%T %E %N"),  # one line per state and reason
)
_KUBECTL_VIEWS = (
    ("get", "pods", "-A", "-o", "wide"),
    ("get", "events", "-A", "--sort-by=.lastTimestamp"),
)
_LOG_TAILS = {"bridge.log": 60, "slurmctld.log": 40}
#: With two controllers (HA=1), the backup host's too.
_BACKUP_LOG_TAILS = {"bridge-backup.log": 60, "slurmctld-backup.log": 40}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and call.when == "call" and item.get_closest_marker("e2e"):
        report.sections.append(("ground at the failure", _ground_at_failure()))
    return report


def _ground_at_failure() -> str:
    where = layout.Layout.default()
    if not where.state_file.exists():
        return "the proving ground is not up"
    # Also when some daemon is down (a test may have killed it): what still answers tells.
    pg = ProvingGround(where)
    views: list[tuple[str, Callable[[], str]]] = [
        *((" ".join(argv), lambda argv=argv: pg.slurm(*argv, check=False, timeout=10))
          for argv in _SLURM_VIEWS),
        *((f"kubectl {' '.join(argv)}",
           lambda argv=argv: "\n".join(pg.kubectl(*argv, check=False, timeout=10)
                                        .splitlines()[-30:]))
          for argv in _KUBECTL_VIEWS),
    ]  # fmt: skip
    parts = [] if ground.healthy(where) else ["(some daemon of the ground is not running)"]
    for title, show in views:
        try:
            parts.append(f"$ {title}\n{show()}")
        except (OSError, subprocess.TimeoutExpired) as error:
            parts.append(f"$ {title}: {error}")
    tails = {**_LOG_TAILS, **(_BACKUP_LOG_TAILS if backup_host.running_ha(State(where)) else {})}
    for name, lines in tails.items():
        path = where.logs / name
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as error:
            tail = [str(error)]
        parts.append(f"--- last {lines} lines of {path}\n" + "\n".join(tail))
    return "\n".join(parts)


@dataclass(frozen=True)
class ProvingGround:
    """Handles the tests need: where things are and how to call Slurm and kubectl."""

    layout: layout.Layout

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "SLURM_CONF": str(self.layout.slurm_conf),
            "KUBECONFIG": str(self.layout.kubeconfig),
        }
        programs = slurm.ground_programs(self.layout)
        # The bridge CLIs the tests run (status, doctor, render-slurm-conf) use the ground's
        # clients, as the ground's bridge does (bridge.yaml says /usr/bin, the host's 22.05).
        env["SKB_SLURM_BIN_DIR"] = str(programs.bin_dir)
        if not programs.on_host:  # Slurm of another series: its clients first on PATH
            env["PATH"] = f"{programs.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    @property
    def series(self) -> str:
        """The Slurm series the ground runs (``make up SLURM=...``)."""
        return slurm.running_series(self.layout)

    @property
    def auth(self) -> str:
        """The ground's authentication, munge or slurm (``make up AUTH=slurm``)."""
        return slurm.running_auth(self.layout)

    def slurm(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        result = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{argv} failed: {result.stderr}")
        return result.stdout

    def kubectl_argv(self, *argv: str) -> list[str]:
        """kubectl as the cluster admin, for a caller that needs more than ``kubectl``'s stdout
        (a process left running; the exit status and stderr of a refusal)."""
        return [
            str(self.layout.kubernetes_bin / "kubectl"),
            f"--kubeconfig={self.layout.kubeconfig}",
            *argv,
        ]

    def kubectl(
        self, *argv: str, check: bool = True, input_text: str | None = None, timeout: float = 120
    ) -> str:
        result = subprocess.run(
            self.kubectl_argv(*argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input_text,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {argv} failed: {result.stderr}")
        return result.stdout


@pytest.fixture(scope="session")
def build_cache() -> ProvingGround:
    """The proving ground's built tools (kustomize, kubectl) without starting anything: for
    tests that only build manifests. `make build` (which `make test` runs first) fills it."""
    where = layout.Layout.default()
    if not where.kustomize_bin.is_file():
        pytest.fail(f"{where.kustomize_bin} missing: run `make build` (or `make test`)")
    return ProvingGround(where)


@pytest.fixture(scope="session")
def proving_ground() -> Iterator[ProvingGround]:
    """Bring the proving ground up unless it runs already; take down only what we started."""
    where = layout.Layout.default()
    started_here = not ground.healthy(where)
    wanted = os.environ.get("SKB_SLURM")  # `make test SLURM=24.11`
    wanted_auth = os.environ.get("SKB_AUTH")  # `make test SLURM=26.05 AUTH=slurm`
    if (
        started_here
        or (wanted and wanted != slurm.running_series(where))
        or (wanted_auth and wanted_auth != slurm.running_auth(where))
        # `make test HA=1`, or a ground left with two controllers by `make up HA=1`
        or backup_host.wanted_from_env() != backup_host.running_ha(State(where))
    ):
        ground.up(where)
    yield ProvingGround(where)
    if started_here and not os.environ.get("SKB_KEEP_PROVING_GROUND"):
        ground.down(where)


@pytest.fixture
def bridge_tmp(proving_ground: ProvingGround, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A temporary directory the ground's bridge can read: it runs as its own user, and
    tmp_path is under pytest's 0700 directory of root's (a config or a bin directory given to
    ``restart_bridge`` goes here). Removed after the test."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:80]
    path = proving_ground.layout.local / "test-tmp" / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    for directory in (path.parent, path):
        directory.chmod(0o755)
    # The bridge's user writes there too (a test's Slurm wrappers count their calls in it).
    bridge_user = pwd.getpwnam(layout.BRIDGE_USER)
    os.chown(path, bridge_user.pw_uid, bridge_user.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


#: ``use(hostlist)`` in a test: the nodes are settled now and again after the test.
Use = Callable[[str], None]


@pytest.fixture
def use(proving_ground: ProvingGround) -> Iterator[Use]:
    """``use(hostlist)``: settle the nodes to idle~ with no pod now, and again after the test."""
    from tests.cluster import reset_nodes, wait_idle_powered_down  # noqa: PLC0415 (cycle)

    used: list[str] = []

    def take(hostlist: str) -> None:
        reset_nodes(proving_ground, hostlist)
        wait_idle_powered_down(proving_ground, hostlist, timeout=90)
        used.append(hostlist)

    yield take
    for hostlist in used:
        reset_nodes(proving_ground, hostlist)
    for hostlist in used:
        wait_idle_powered_down(proving_ground, hostlist, timeout=90)
