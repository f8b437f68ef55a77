"""slurm_plugins/job_ready (PrologSlurmctld): waits while the job's nodes power up, then returns;
always exits 0. Run for real (sh, as slurmctld does: no PATH) against a scripted sinfo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hooks(tmp_path: Path, answers: list[str | None], max_s: str = "") -> Path:
    """Copies of the hook files, a hooks.env and a sinfo printing ``answers`` in turn
    (None: sinfo fails); the last answer repeats."""
    hooks = tmp_path / "slurm_plugins"
    hooks.mkdir()
    for name in ("job_ready", "job_ready.sh", "hook.sh"):
        (hooks / name).write_bytes((ROOT / "slurm_plugins" / name).read_bytes())
        (hooks / name).chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for i, answer in enumerate(answers):
        (bin_dir / f"answer.{i}").write_text("FAIL" if answer is None else answer)
    sinfo = bin_dir / "sinfo"
    sinfo.write_text(
        "#!/bin/sh\n"
        f'd={bin_dir}\nn=$(/bin/cat "$d/calls" 2>/dev/null || echo 0)\n'
        'echo $((n + 1)) > "$d/calls"\necho "$*" >> "$d/argv"\n'
        'echo "${SLURM_CONF:-unset}" >> "$d/conf"\n'
        f'[ -f "$d/answer.$n" ] || n={len(answers) - 1}\n'
        'a=$(/bin/cat "$d/answer.$n")\n[ "$a" = FAIL ] && exit 1\n'
        '[ -n "$a" ] && printf "%s\\n" "$a"\nexit 0\n'
    )
    sinfo.chmod(0o755)
    env = (
        f"SKB_SLURM_BIN={bin_dir}\nSKB_HOOK_LOG={tmp_path / 'hooks.log'}\n"
        "SKB_SLURM_CONF=/etc/site/slurm.conf\n"
    )
    if max_s:
        env += f"SKB_JOB_READY_MAX_S={max_s}\n"
    (hooks / "hooks.env").write_text(env)
    return hooks


@pytest.mark.parametrize(
    ("answers", "max_s", "calls", "logged"),
    [
        (["mix"], "", 1, None),  # up already: one sinfo, no wait, no line
        (["alloc#\nalloc#", "alloc\nalloc"], "", 2, "result=ready waited_ms=200"),
        (["alloc~", "alloc#", "mix"], "", 3, "result=ready waited_ms=400"),
        (["alloc#", "down~"], "", 2, "result=node-down waited_ms=200"),
        (["alloc#", "drain"], "", 2, "result=node-down waited_ms=200"),
        ([""], "", 1, None),  # sinfo shows none of the nodes (22.05 without PrivateData=cloud)
        ([None, "idle"], "", 2, "result=ready waited_ms=200"),  # sinfo failed once
        (["alloc#"], "1", 5, "result=timeout waited_ms=1000"),
        ([None], "", 5, "result=sinfo-failed waited_ms=800"),  # never holds jobs for long
        (["alloc#"], "nonsense", 1, None),  # a typo means the default, not "no wait" ...
    ],
    ids=[
        "up-at-once",
        "powering-up",
        "powered-down-first",
        "node-down",
        "node-drain",
        "not-shown",
        "sinfo-failed",
        "gives-up",
        "sinfo-fails",
        "bad-max",
    ],
)
def test_job_ready(
    tmp_path: Path, answers: list[str | None], max_s: str, calls: int, logged: str | None
) -> None:
    hooks = _hooks(tmp_path, answers, max_s)
    if max_s == "nonsense":  # ... shown by the first answer being up already
        (tmp_path / "bin" / "answer.0").write_text("idle")
    env = {"PWD": "/", "SHLVL": "1", "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "cpu-[0-1]"}
    done = subprocess.run(
        [str(hooks / "job_ready")], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int((tmp_path / "bin" / "calls").read_text()) == calls
    assert (tmp_path / "bin" / "argv").read_text().splitlines()[0] == "-h -N -n cpu-[0-1] -o %t"
    # slurmctld passes a PrologSlurmctld no SLURM_CONF: hooks.env's SKB_SLURM_CONF stands in.
    assert set((tmp_path / "bin" / "conf").read_text().split()) == {"/etc/site/slurm.conf"}
    log = tmp_path / "hooks.log"
    if logged is None:
        assert not log.exists() or log.read_text() == ""
    else:
        line = log.read_text().strip()
        assert " job_ready job=42 hostlist=cpu-[0-1] " in line, line
        assert line.endswith(logged), line


def test_without_a_nodelist_it_returns_at_once(tmp_path: Path) -> None:
    hooks = _hooks(tmp_path, ["alloc#"])
    done = subprocess.run(
        [str(hooks / "job_ready")], env={"PWD": "/"}, capture_output=True, timeout=30, check=False
    )
    assert done.returncode == 0
    assert not (tmp_path / "bin" / "calls").exists()
