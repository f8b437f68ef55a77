"""The site guide, executed (issue 28 item 2): every ``sh`` block of docs/site-guide.md carries a
marker, ``<!-- guide-test: run -->`` (run against the proving ground as written, after the
substitutions below), ``<!-- guide-test: run as the job user -->`` or
``<!-- guide-test: skip: <why> -->``; the blocks run in the guide's order, so the guide cannot
drift from what works.

What a site substitutes is explicit, in :data:`SUBSTITUTIONS`: its paths (a scratch prefix here,
so nothing of the ground's is replaced), its Python, its namespace (a scratch one for the
Secret and the allow-list), its registry, its partition. Each entry must still occur in the
guide, so the table cannot outlive the text it stands for.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from proving_ground import bridge_install
from proving_ground.bridge_daemon import SHARED_DIR, bridge_settings
from proving_ground.layout import BRIDGE_USER, JOB_USER
from proving_ground.slurm import bridge_config_path, render_slurm_conf, running_auth
from proving_ground.slurm import running_series as ground_series

from tests.conftest import ProvingGround

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "site-guide.md"
NAMESPACE = "guide-test"
MARKER = re.compile(r"<!-- guide-test: (run as the job user|run|skip: (?P<why>.+?)) -->")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence
    marker: str  # "run", "run as the job user" or "skip"
    text: str


def guide_blocks(text: str) -> list[Block]:
    """The ``sh`` blocks with their markers; a block without one is an error naming its line."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != "```sh":
            continue
        marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
        if marker is None:
            raise AssertionError(
                f"docs/site-guide.md:{i + 1}: a sh block without a guide-test marker on the "
                "line before it (run, run as the job user, or skip: <why>)"
            )
        end = lines.index("```", i + 1)
        kind = "skip" if marker.group("why") else marker.group(1)
        blocks.append(Block(i + 1, kind, "\n".join(lines[i + 1 : end]) + "\n"))
    return blocks


def substitutions(site: Path, wheel: Path, munge_key: Path) -> dict[str, str]:
    """Site text -> what the proving ground uses, applied in this order."""
    return {
        "python3.11": "/usr/bin/python3",
        "slurm_k8s_bridge-<version>-py3-none-any.whl": str(wheel),
        "/opt/slurm-k8s-bridge": f"{site}/opt/slurm-k8s-bridge",
        "/etc/slurm-k8s-bridge": f"{site}/etc/slurm-k8s-bridge",
        "/etc/slurm/": f"{site}/etc/slurm/",
        "/etc/munge/munge.key": str(munge_key),
        # DESTDIR: the unit and its files land under the scratch prefix, not in /usr.
        "install-service": f"install-service --root {site}",
        "-n slurm ": f"-n {NAMESPACE} ",
        "namespace slurm ": f"namespace {NAMESPACE} ",
        "registry.example.org/hpc/slurmd:*": "localhost/slurm-k8s-bridge/slurmd:*",
        "sudo -u slurm-k8s-bridge": "runuser -u slurm-k8s-bridge --",
        "<a directory the pods mount>": str(SHARED_DIR),
        "<a bridge partition>": "cpu",
    }


def substitute(text: str, table: dict[str, str]) -> str:
    for site_text, ground in table.items():
        text = text.replace(site_text, ground)
    return text


def test_every_sh_block_of_the_guide_is_marked_and_every_substitution_is_used() -> None:
    text = GUIDE.read_text()
    blocks = guide_blocks(text)
    assert [b.marker for b in blocks].count("run") >= 5, blocks
    ran = "".join(b.text for b in blocks if b.marker != "skip")
    unused = [k for k in substitutions(Path("/s"), Path("/w"), Path("/k")) if k not in ran]
    assert not unused, f"substitutions for text the guide's run blocks no longer have: {unused}"


@pytest.fixture
def site(proving_ground: ProvingGround) -> Iterator[Path]:
    """A scratch prefix every user can read (the bridge's user runs doctor from it)."""
    path = proving_ground.layout.local / "test-tmp" / "site-guide"
    shutil.rmtree(path, ignore_errors=True)
    for directory in ("etc/slurm", "etc/slurm-k8s-bridge", "opt"):
        (path / directory).mkdir(parents=True)
    for directory in (path.parent, path, *path.rglob("*")):
        directory.chmod(0o755)
    # The guide grants AdminLevel in account root; the ground's grant is in its own account.
    # Dropped before and after, so that the guide's `sacctmgr -i add` adds something each run.
    forget_root_association = (
        "sacctmgr", "-i", "delete", "user", f"name={BRIDGE_USER}", "account=root",
    )  # fmt: skip
    proving_ground.slurm(*forget_root_association, check=False)
    yield path
    proving_ground.slurm(*forget_root_association, check=False)
    shutil.rmtree(path, ignore_errors=True)
    proving_ground.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


def _wheel(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return bridge_install.build_wheel(ROOT, out)


def test_the_guide_s_blocks_run_against_the_proving_ground(
    proving_ground: ProvingGround, site: Path
) -> None:
    pg = proving_ground
    # What a site has before the guide: its slurm.conf without the bridge's Include, and the
    # bridge's configuration (the ground's, with the settings the ground gives by environment).
    site_conf = render_slurm_conf(pg.layout, ground_series(pg.layout), running_auth(pg.layout))
    (site / "etc/slurm/slurm.conf").write_text(
        "\n".join(line for line in site_conf.splitlines() if not line.startswith("Include ")) + "\n"
    )
    shutil.copy(bridge_config_path(pg.layout), site / "etc/slurm-k8s-bridge/bridge.yaml")
    (site / "etc/slurm-k8s-bridge/bridge.yaml").chmod(0o644)
    pg.kubectl("create", "namespace", NAMESPACE)
    table = substitutions(site, _wheel(site / "wheels"), pg.layout.munge_key)
    env = {
        **pg.env,
        **bridge_settings(pg.layout),
        "PATH": f"{site}/opt/slurm-k8s-bridge/venv/bin:{pg.layout.bin}:{pg.env['PATH']}",
    }
    first_job = SHARED_DIR / "first-job.out"
    first_job.unlink(missing_ok=True)
    outputs = []
    for number, block in enumerate(guide_blocks(GUIDE.read_text())):
        if block.marker == "skip":
            continue
        script = site / f"block-{number}.sh"
        script.write_text(substitute(block.text, table))
        script.chmod(0o644)
        argv = ["bash", "-euo", "pipefail", str(script)]
        if block.marker == "run as the job user":
            argv = ["runuser", "-u", JOB_USER, "--", *argv]
        done = subprocess.run(
            argv, env=env, cwd=site, capture_output=True, text=True, timeout=900, check=False
        )
        assert done.returncode == 0, (
            f"docs/site-guide.md:{block.line}: exited {done.returncode}\n{script.read_text()}\n"
            f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
        )
        outputs.append(done.stdout)
    everything = "\n".join(outputs)
    # The install: the version, and the unit where install-service put it.
    assert re.search(r"slurm-k8s-bridge \d+\.\d+\.\d+", everything), everything[:2000]
    assert (site / "usr/lib/systemd/system/slurm-k8s-bridge.service").is_file()
    # The render and the Include.
    assert "NodeName=cpu-[0-15]" in (site / "etc/slurm/k8s-bridge.conf").read_text()
    assert (site / "etc/slurm/slurm.conf").read_text().splitlines()[-1] == (
        "Include k8s-bridge.conf"
    )
    # The rights, the allow-list, doctor (its exit status is the block's).
    assert "slurm-k8s-bridge|Administrator" in everything.splitlines(), everything[-3000:]
    allowed = pg.kubectl(
        "get", "namespace", NAMESPACE, "-o",
        r"jsonpath={.metadata.annotations.slurm-k8s-bridge\.io/allowed-images}",
    )  # fmt: skip
    assert allowed == "localhost/slurm-k8s-bridge/slurmd:*", allowed
    assert re.search(r"doctor: \d+ pass", everything), everything[-3000:]
    # The first job, as a user only this host knows: its node's name, and the user's where the
    # image has nss_slurm.
    out = first_job.read_text()
    assert re.search(r"^cpu-\d+$", out, re.MULTILINE), out
    assert JOB_USER in out or "cannot find name for user ID" in out, out
    first_job.unlink(missing_ok=True)
