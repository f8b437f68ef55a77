"""``slurm-k8s-bridge install-service``: what goes where under ``--root``, with which mode;
``--dry-run`` writes nothing; a file under /etc is never overwritten while /usr's are replaced;
a missing data file is an error naming it. The data folder is laid out from this checkout's
files exactly as pyproject's data-files ship them (the wheel itself: tests/tooling/
test_wheel_contents.py)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.cli.install_service import (
    HOOKS_ENV,
    SHIPPED_FILES,
    unit_program_note,
)
from bridge.cli.main import main

ROOT = Path(__file__).resolve().parents[2]

#: The spec: where each file of the checkout lands, and its mode.
INSTALLED = [
    (
        "usr/lib/systemd/system/slurm-k8s-bridge.service",
        "deploy/systemd/slurm-k8s-bridge.service",
        0o644,
    ),
    (
        "usr/lib/sysusers.d/slurm-k8s-bridge.conf",
        "deploy/systemd/sysusers.d/slurm-k8s-bridge.conf",
        0o644,
    ),
    (
        "usr/lib/tmpfiles.d/slurm-k8s-bridge.conf",
        "deploy/systemd/tmpfiles.d/slurm-k8s-bridge.conf",
        0o644,
    ),
    ("etc/logrotate.d/slurm-k8s-bridge-hooks", "deploy/logrotate/slurm-k8s-bridge-hooks", 0o644),
    ("etc/slurm-k8s-bridge/bridge.yaml.example", "deploy/examples/bridge.yaml", 0o644),
    ("etc/slurm-k8s-bridge/hooks.env.example", "slurm_plugins/hooks.env.example", 0o644),
    ("etc/slurm-k8s-bridge/slurm.conf.example", "slurm_plugins/slurm.conf.example", 0o644),
    ("usr/libexec/slurm-k8s-bridge/job_ready", "slurm_plugins/job_ready", 0o755),
    ("usr/libexec/slurm-k8s-bridge/hook.sh", "slurm_plugins/hook.sh", 0o644),
    ("usr/libexec/slurm-k8s-bridge/job_ready.sh", "slurm_plugins/job_ready.sh", 0o644),
    ("usr/libexec/slurm-k8s-bridge/strigger-setup.sh", "slurm_plugins/strigger-setup.sh", 0o755),
    ("usr/share/doc/slurm-k8s-bridge/site-guide.md", "docs/site-guide.md", 0o644),
    ("usr/share/doc/slurm-k8s-bridge/CHANGELOG.md", "CHANGELOG.md", 0o644),
]
SITE_FILES = [row for row in INSTALLED if row[0].startswith("etc/")]
PACKAGE_FILES = [row for row in INSTALLED if row[0].startswith("usr/")]
LINK = "usr/libexec/slurm-k8s-bridge/hooks.env"


def shipped_layout() -> dict[str, Path]:
    """pyproject's data-files as the wheel lays them out: path under share/slurm-k8s-bridge ->
    the checkout's file (each entry is a one-file pattern)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    layout = {}
    for destination, patterns in pyproject["tool"]["setuptools"]["data-files"].items():
        folder = Path(destination).relative_to("share/slurm-k8s-bridge")
        for pattern in patterns:
            (source,) = sorted(ROOT.glob(pattern))
            layout[str(folder / source.name)] = source
    return layout


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """share/slurm-k8s-bridge as pip installs it from the wheel."""
    data = tmp_path / "share" / "slurm-k8s-bridge"
    for relative, source in shipped_layout().items():
        (data / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, data / relative)
    return data


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


@pytest.fixture
def umask_077() -> Iterator[None]:
    """A strict administrator's umask: what install-service creates must not depend on it."""
    old = os.umask(0o077)
    yield
    os.umask(old)


def install(data_dir: Path, root: Path, *extra: str) -> int:
    return main(["install-service", "--data-dir", str(data_dir), "--root", str(root), *extra])


def test_it_installs_exactly_what_the_wheel_ships() -> None:
    assert sorted(str(f.source) for f in SHIPPED_FILES) == sorted(shipped_layout())
    assert sorted(str(f.target).lstrip("/") for f in SHIPPED_FILES) == sorted(
        row[0] for row in INSTALLED
    )


@pytest.mark.parametrize(("target", "source", "mode"), INSTALLED, ids=[r[0] for r in INSTALLED])
def test_each_file_lands_in_its_place_with_its_mode(
    target: str,
    source: str,
    mode: int,
    *,
    data_dir: Path,
    root: Path,
    umask_077: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert install(data_dir, root) == 0
    installed = root / target
    assert installed.read_bytes() == (ROOT / source).read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == mode
    assert f"wrote {installed} (mode {mode:04o}, from {data_dir}/" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("folder", "mode"),
    [
        # tmpfiles.d's mode; tmpfiles then hands it to SlurmUser's group.
        ("etc/slurm-k8s-bridge", 0o750),
        # SlurmUser runs job_ready from here.
        ("usr/libexec/slurm-k8s-bridge", 0o755),
        ("usr/lib/systemd/system", 0o755),
        ("usr/share/doc/slurm-k8s-bridge", 0o755),
    ],
)
def test_folders_it_creates_have_their_mode_whatever_the_umask(
    folder: str, mode: int, data_dir: Path, root: Path, umask_077: None
) -> None:
    assert install(data_dir, root) == 0
    assert stat.S_IMODE((root / folder).stat().st_mode) == mode


def test_hooks_env_next_to_job_ready_links_to_the_installed_systems_settings(
    data_dir: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install(data_dir, root) == 0
    # The installed system's path, not one under --root: the link is read there.
    assert os.readlink(root / LINK) == str(HOOKS_ENV) == "/etc/slurm-k8s-bridge/hooks.env"
    assert f"linked {root / LINK} -> /etc/slurm-k8s-bridge/hooks.env" in capsys.readouterr().out


def test_the_installed_prolog_runs_from_its_folder(data_dir: Path, root: Path) -> None:
    """job_ready finds hook.sh and job_ready.sh beside it; with no nodes it returns at once, 0."""
    assert install(data_dir, root) == 0
    done = subprocess.run(
        [str(root / "usr/libexec/slurm-k8s-bridge/job_ready")],
        env={"PWD": "/", "SHLVL": "1", "SLURM_JOB_ID": "7"},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_units_documentation_is_a_file_it_installs() -> None:
    unit = (ROOT / "deploy/systemd/slurm-k8s-bridge.service").read_text()
    (documentation,) = [line for line in unit.splitlines() if line.startswith("Documentation=")]
    target = documentation.removeprefix("Documentation=file://")
    assert target in {str(f.target) for f in SHIPPED_FILES}


def test_dry_run_writes_nothing_and_says_what_it_would_do(
    data_dir: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install(data_dir, root, "--dry-run") == 0
    assert list(root.iterdir()) == []
    lines = capsys.readouterr().out.splitlines()
    would = [line for line in lines if line.startswith("would ")]
    assert [line.split()[2] for line in would] == [
        *(str(root / target) for target, _, _ in INSTALLED),
        str(root / LINK),
    ]
    assert {line.split()[1] for line in would} == {"write", "link"}


@pytest.mark.parametrize(("target", "source", "mode"), SITE_FILES, ids=[r[0] for r in SITE_FILES])
@pytest.mark.parametrize("dry_run", [False, True], ids=["install", "dry-run"])
def test_a_file_under_etc_that_exists_is_kept(
    target: str,
    source: str,
    mode: int,
    dry_run: bool,
    *,
    data_dir: Path,
    root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    existing = root / target
    existing.parent.mkdir(parents=True)
    existing.write_text("the site's own\n")
    existing.chmod(0o600)
    assert install(data_dir, root, *(["--dry-run"] if dry_run else [])) == 0
    assert existing.read_text() == "the site's own\n"
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600
    word = "would keep" if dry_run else "kept"
    assert f"{word} {existing} (exists; not overwritten)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "source", "mode"), PACKAGE_FILES, ids=[r[0] for r in PACKAGE_FILES]
)
def test_a_file_under_usr_is_replaced_so_an_upgrade_brings_the_new_one(
    target: str, source: str, mode: int, data_dir: Path, root: Path
) -> None:
    assert install(data_dir, root) == 0
    (root / target).write_text("an older release's\n")
    (root / target).chmod(0o600)
    assert install(data_dir, root) == 0
    assert (root / target).read_bytes() == (ROOT / source).read_bytes()
    assert stat.S_IMODE((root / target).stat().st_mode) == mode
    assert not [p.name for p in (root / target).parent.iterdir() if p.name.startswith(".")]


def test_a_settings_file_where_the_link_goes_is_kept(
    data_dir: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = root / LINK
    settings.parent.mkdir(parents=True)
    settings.write_text("SKB_SLURM_CONF=/etc/slurm/slurm.conf\n")
    assert install(data_dir, root) == 0
    assert not settings.is_symlink()
    assert settings.read_text() == "SKB_SLURM_CONF=/etc/slurm/slurm.conf\n"
    assert f"kept {settings} (exists; not overwritten)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("remove", "named"),
    [
        # An editable install or a source checkout: no data folder at all.
        ("", "systemd/slurm-k8s-bridge.service and 12 more"),
        ("systemd/slurm-k8s-bridge.service", "systemd/slurm-k8s-bridge.service. "),
        ("libexec/job_ready.sh", "libexec/job_ready.sh. "),
        ("doc/CHANGELOG.md", "doc/CHANGELOG.md. "),
    ],
    ids=["no-data-folder", "unit", "prolog-part", "changelog"],
)
@pytest.mark.parametrize("dry_run", [False, True], ids=["install", "dry-run"])
def test_a_missing_data_file_is_an_error_naming_it(
    remove: str,
    named: str,
    dry_run: bool,
    *,
    data_dir: Path,
    root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if remove:
        (data_dir / remove).unlink()
    else:
        shutil.rmtree(data_dir)
    assert install(data_dir, root, *(["--dry-run"] if dry_run else [])) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("slurm-k8s-bridge install-service: the package's data files are not ")
    assert f"no {data_dir}/{named}" in err
    assert "install the wheel" in err
    assert err.count("\n") == 1
    assert list(root.iterdir()) == []


def test_a_root_that_is_not_a_folder_is_an_error(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install(data_dir, tmp_path / "absent") == 1
    assert "--root" in capsys.readouterr().err
    assert not (tmp_path / "absent").exists()


def test_an_earlier_manual_unit_in_etc_is_named(
    data_dir: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manual = root / "etc/systemd/system/slurm-k8s-bridge.service"
    manual.parent.mkdir(parents=True)
    manual.write_text("[Unit]\n")
    assert install(data_dir, root) == 0
    assert manual.read_text() == "[Unit]\n"
    assert f"note: {manual} overrides the unit in /usr/lib/systemd/system" in (
        capsys.readouterr().out
    )


VENV_PROGRAM = Path("/opt/slurm-k8s-bridge/venv/bin/slurm-k8s-bridge")


@pytest.mark.parametrize(
    ("unit", "program", "note"),
    [
        (
            "[Service]\nExecStart=/opt/slurm-k8s-bridge/venv/bin/slurm-k8s-bridge serve -c x\n",
            VENV_PROGRAM,
            None,
        ),
        (
            "[Service]\nExecStart=/opt/slurm-k8s-bridge/venv/bin/slurm-k8s-bridge serve\n",
            Path("/srv/bridge/bin/slurm-k8s-bridge"),
            "note: the unit runs /opt/slurm-k8s-bridge/venv/bin/slurm-k8s-bridge, this "
            "install's is /srv/bridge/bin/slurm-k8s-bridge: install into "
            "/opt/slurm-k8s-bridge/venv, or set ExecStartPre= and ExecStart= in a drop-in "
            "(systemctl edit slurm-k8s-bridge)",
        ),
        # ExecStartPre= is not ExecStart=.
        ("ExecStartPre=/usr/bin/true\nExecStart=/x/bin/slurm-k8s-bridge serve\n", VENV_PROGRAM,
         "note: the unit runs /x/bin/slurm-k8s-bridge, this install's is "
         f"{VENV_PROGRAM}: install into /x, or set ExecStartPre= and ExecStart= in a drop-in "
         "(systemctl edit slurm-k8s-bridge)"),
        ("[Service]\n", VENV_PROGRAM, None),
    ],
    ids=["same", "other-venv", "pre-is-not-start", "no-exec-start"],
)  # fmt: skip
def test_unit_program_note(unit: str, program: Path, note: str | None) -> None:
    assert unit_program_note(unit, program) == note


def test_the_shipped_unit_runs_the_site_guides_venv() -> None:
    unit = (ROOT / "deploy/systemd/slurm-k8s-bridge.service").read_text()
    assert unit_program_note(unit, VENV_PROGRAM) is None
