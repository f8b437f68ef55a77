"""``make-kubeconfig.sh`` gives the file the owner and mode the site guide states (0400, owned by
``slurm-k8s-bridge`` by default) before it renames it into place, so a running bridge, which
re-reads a changed kubeconfig, never sees a file it may not open or half a file.

No cluster: a stub ``kubectl`` first on ``PATH`` answers the script's questions, and a stub ``mv``
records the temporary file's owner and mode at the moment of the rename.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "kustomize" / "overlays" / "external" / "make-kubeconfig.sh"
DEFAULT_OWNER = "slurm-k8s-bridge"
#: What the stub kubectl hands out, run after run.
ISSUED = ("tok-1", "tok-2")

KUBECTL = """#!/bin/sh
echo "$*" >> "{log}"
case "$*" in
*"create token"*) cat "{token}" ;;
*certificate-authority-data*) echo Q0EK ;;
*cluster.server*) echo https://10.0.0.1:6443 ;;
*context.cluster*) echo lab ;;
esac
"""
MV = """#!/bin/sh
for a; do case $a in -*) ;; *) stat -c '%u:%g %a' "$a" >> "{log}"; break ;; esac; done
exec /bin/mv "$@"
"""


def uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


NOBODY = pwd.getpwnam("nobody")
NOBODY_GROUP = grp.getgrgid(NOBODY.pw_gid).gr_name
ME = pwd.getpwuid(os.geteuid()).pw_name
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@dataclass
class Run:
    out: Path
    result: subprocess.CompletedProcess[str]
    renamed: list[str]  # "uid:gid mode" of each file mv renamed, as it was then
    kubectl: list[str]


def make_kubeconfig(tmp_path: Path, *args: str, issued: str = ISSUED[0]) -> Run:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (tmp_path / "token").write_text(issued + "\n")
    for name, text in (("kubectl", KUBECTL), ("mv", MV)):
        stub = stubs / name
        log = tmp_path / f"{name}.log"
        stub.write_text(text.format(log=log, token=tmp_path / "token"))
        stub.chmod(0o755)
        log.touch()
    out = tmp_path / "etc" / "kubeconfig"
    out.parent.mkdir(exist_ok=True)
    result = subprocess.run(
        [str(SCRIPT), *args, str(out)],
        env={"PATH": f"{stubs}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return Run(
        out,
        result,
        (tmp_path / "mv.log").read_text().splitlines(),
        (tmp_path / "kubectl.log").read_text().splitlines(),
    )


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


# What the file's owner (uid, gid) is after each -o; None: unchanged from the one running it.
default_uid = uid_of(DEFAULT_OWNER)


@pytest.mark.parametrize(
    ("args", "uid", "gid"),
    [
        pytest.param(
            (),
            default_uid,
            None,
            id=f"default-{DEFAULT_OWNER}-{'exists' if default_uid is not None else 'absent'}",
            marks=[ROOT_ONLY] if default_uid is not None else [],
        ),
        pytest.param(("-o", ME), None, None, id="-o-me"),
        pytest.param(("-o", "nobody"), NOBODY.pw_uid, None, id="-o-user", marks=ROOT_ONLY),
        pytest.param(
            ("-o", f"nobody:{NOBODY_GROUP}"),
            NOBODY.pw_uid,
            NOBODY.pw_gid,
            id="-o-user-group",
            marks=ROOT_ONLY,
        ),
    ],
)
def test_the_file_has_its_owner_and_mode_before_it_is_renamed_into_place(
    tmp_path: Path, args: tuple[str, ...], uid: int | None, gid: int | None
) -> None:
    run = make_kubeconfig(tmp_path, "-n", "hpc", "-d", "1h", *args)
    assert run.result.returncode == 0, run.result.stderr
    expected = (
        os.geteuid() if uid is None else uid,
        os.getegid() if gid is None else gid,
        0o400,
    )
    assert owner_and_mode(run.out) == expected
    assert run.renamed == [f"{expected[0]}:{expected[1]} 400"]
    assert "hpc create token slurm-k8s-bridge --duration=1h" in "\n".join(run.kubectl)
    doc = yaml.safe_load(run.out.read_text())
    assert doc["users"][0]["user"]["token"] == ISSUED[0]
    assert doc["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"
    assert sorted(p.name for p in run.out.parent.iterdir()) == ["kubeconfig"]
    assert "mode 0400" in run.result.stderr


def test_a_rotation_replaces_the_0400_file_with_a_new_one(tmp_path: Path) -> None:
    first = make_kubeconfig(tmp_path, "-o", ME)
    inode = first.out.stat().st_ino
    second = make_kubeconfig(tmp_path, "-o", ME, issued=ISSUED[1])
    assert second.result.returncode == 0, second.result.stderr
    # A new inode: the bridge's stat sees the change; its open file, if any, stays whole.
    assert second.out.stat().st_ino != inode
    assert yaml.safe_load(second.out.read_text())["users"][0]["user"]["token"] == ISSUED[1]
    assert owner_and_mode(second.out)[2] == 0o400


def test_an_owner_it_cannot_give_leaves_the_old_file_alone(tmp_path: Path) -> None:
    old = tmp_path / "etc" / "kubeconfig"
    old.parent.mkdir()
    old.write_text("the old kubeconfig\n")
    old.chmod(0o600)
    run = make_kubeconfig(tmp_path, "-o", "skb-no-such-user")
    assert run.result.returncode == 1
    assert "cannot make" in run.result.stderr
    assert "skb-no-such-user" in run.result.stderr
    assert old.read_text() == "the old kubeconfig\n"
    assert owner_and_mode(old)[2] == 0o600
    assert run.renamed == []
    assert sorted(p.name for p in old.parent.iterdir()) == ["kubeconfig"]  # no temporary left


def test_the_usage_names_the_owner_option(tmp_path: Path) -> None:
    run = make_kubeconfig(tmp_path, "-h")
    assert run.result.returncode == 2
    assert "[-o OWNER[:GROUP]]" in run.result.stderr
    assert run.kubectl == []
