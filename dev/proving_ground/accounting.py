"""Accounting as a site runs it: MariaDB of our own (Debian's, on loopback) and slurmdbd of the
ground's Slurm series, both before slurmctld; then the associations the site guide asks for
(the cluster, an account, the job user, and the bridge's user with ``AdminLevel=Admin``).

AdminLevel is the least that works for the bridge: every write it makes (``scontrol update``
of a node's state, reason, NodeAddr and Comment, a job's AdminComment) is checked by slurmctld's
``validate_super_user`` (root, SlurmUser or AdminLevel=Admin); Operator is refused them. An
AdminLevel needs slurmdbd: without accounting, only root or SlurmUser could run the bridge.
"""

from __future__ import annotations

import logging
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from pathlib import Path

from . import slurm_series
from .layout import (
    BRIDGE_USER,
    GROUND_RUN,
    JOB_USER,
    MARIADB_PORT,
    MUNGE_SOCKET,
    SLURM_USER,
    SLURMDBD_PORT,
    Layout,
)
from .processes import ProvingGroundError, State, run, start_daemon, wait_until

log = logging.getLogger(__name__)

DATABASE = "slurm_acct_db"
#: The account the job user's association hangs from (sacctmgr's tree: root -> ground).
ACCOUNT = "ground"
MARIADB_SOCKET = f"{GROUND_RUN}/mariadb/mysqld.sock"
#: MariaDB runs as its own user; mariadb-server-core (all we install) does not create it.
MARIADB_USER = "mysql"


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def ensure_users() -> None:
    """The site layout's users, created when missing (kept by ``make down``, like packages):
    SlurmUser (Debian's slurm packages make it), the bridge's (as the shipped sysusers.d line
    says: system user, primary group SlurmUser's, no home, no shell), the job user (a normal
    user with a home, known to this host only) and MariaDB's."""
    if not _has_user(SLURM_USER):
        run(["useradd", "--system", "--user-group", "--home-dir", "/nonexistent",
             "--no-create-home", "--shell", "/usr/sbin/nologin", SLURM_USER])  # fmt: skip
    if not _has_user(BRIDGE_USER):
        run(["useradd", "--system", "--gid", SLURM_USER, "--home-dir", "/nonexistent",
             "--no-create-home", "--shell", "/usr/sbin/nologin",
             "--comment", "slurm-k8s-bridge service", BRIDGE_USER])  # fmt: skip
    if not _has_user(JOB_USER):
        run(["useradd", "--create-home", "--shell", "/bin/bash",
             "--comment", "proving ground job user", JOB_USER])  # fmt: skip
    if not _has_user(MARIADB_USER):
        run(["useradd", "--system", "--user-group", "--home-dir", "/nonexistent",
             "--no-create-home", "--shell", "/usr/sbin/nologin", MARIADB_USER])  # fmt: skip


def chown_to(path: Path, user: str) -> None:
    """``path`` (and, for a directory, everything in it) owned by ``user`` and its group."""
    entry = pwd.getpwnam(user)
    targets = [path]
    if path.is_dir():
        targets += [p for p in path.rglob("*") if not p.is_symlink()]
    for target in targets:
        os.chown(target, entry.pw_uid, entry.pw_gid)


def _password_file(layout: Layout) -> Path:
    return layout.local / "mariadb.password"


def _password(layout: Layout) -> str:
    """slurmdbd's database password: made once, readable by root only (slurmdbd.conf, its
    other copy, is SlurmUser's and 0600 as slurmdbd demands)."""
    path = _password_file(layout)
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def _datadir(layout: Layout) -> Path:
    return layout.local / "mariadb"


def start_mariadb(layout: Layout, state: State) -> None:
    """MariaDB on 127.0.0.1:MARIADB_PORT with its data under .local/mariadb (made once)."""
    datadir = _datadir(layout)
    if not (datadir / "mysql").exists():
        shutil.rmtree(datadir, ignore_errors=True)
        datadir.mkdir(parents=True)
        chown_to(datadir, MARIADB_USER)
        run(["mariadb-install-db", "--no-defaults", f"--user={MARIADB_USER}",
             f"--datadir={datadir}", "--auth-root-authentication-method=socket",
             "--skip-test-db"], timeout_s=300)  # fmt: skip
    Path(MARIADB_SOCKET).parent.mkdir(parents=True, exist_ok=True)
    chown_to(Path(MARIADB_SOCKET).parent, MARIADB_USER)
    start_daemon(
        state,
        "mariadb",
        [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            f"--user={MARIADB_USER}",
            f"--datadir={datadir}",
            f"--socket={MARIADB_SOCKET}",
            f"--pid-file={Path(MARIADB_SOCKET).parent / 'mariadbd.pid'}",
            "--bind-address=127.0.0.1",
            f"--port={MARIADB_PORT}",
            # slurmdbd's advice (https://slurm.schedmd.com/accounting.html); it still warns
            # that the buffer pool is small: a proving ground's database is.
            "--innodb-buffer-pool-size=256M",
            "--innodb-lock-wait-timeout=900",
        ],
        log_dir=layout.logs,
    )
    wait_until(
        "mariadb",
        lambda: _sql("SELECT 1", check=False).returncode == 0,
        timeout_s=60,
        log_path=layout.logs / "mariadb.log",
    )
    password = _password(layout)
    for statement in (
        f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'",
        f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'",
        f"GRANT ALL ON {DATABASE}.* TO 'slurm'@'127.0.0.1'",
    ):
        _sql(statement)


def drop_database() -> None:
    """Forget every job and association (a switch of Slurm series: see slurm.start_slurm)."""
    _sql(f"DROP DATABASE IF EXISTS {DATABASE}")


def _sql(statement: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    # Root over the socket (unix_socket authentication): no password of root's anywhere.
    return run(
        ["mariadb", f"--socket={MARIADB_SOCKET}", "--batch", "-e", statement],
        check=check,
        timeout_s=30,
    )


def slurmdbd_conf_path(layout: Layout) -> Path:
    """Beside slurm.conf: slurmdbd reads slurmdbd.conf from SLURM_CONF's directory."""
    return layout.slurm_conf.parent / "slurmdbd.conf"


def render_slurmdbd_conf(layout: Layout, auth: str, password: str) -> str:
    host = socket.gethostname().split(".")[0]
    auth_lines = (
        ["AuthType=auth/slurm"]
        if auth == slurm_series.AUTH_SLURM
        else ["AuthType=auth/munge", f"AuthInfo=socket={MUNGE_SOCKET}"]
    )
    return "\n".join(
        [
            "# Written by the proving ground (dev/proving_ground/accounting.py); edits are lost.",
            f"DbdHost={host}",
            f"DbdPort={SLURMDBD_PORT}",
            f"SlurmUser={SLURM_USER}",
            *auth_lines,
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={MARIADB_PORT}",
            "StorageUser=slurm",
            f"StoragePass={password}",
            f"StorageLoc={DATABASE}",
            # No LogFile: its stderr is the daemon's log (.local/logs/slurmdbd.log).
            f"PidFile={layout.slurm / 'state' / 'slurmdbd.pid'}",
            "DebugLevel=info",
            "",
        ]
    )


def start_slurmdbd(
    layout: Layout,
    state: State,
    programs: slurm_series.SlurmPrograms,
    auth: str,
    env: dict[str, str],
) -> None:
    """slurmdbd of the ground's series (it drops to SlurmUser), answering sacctmgr."""
    conf = slurmdbd_conf_path(layout)
    text = render_slurmdbd_conf(layout, auth, _password(layout))
    if conf.exists() and conf.read_text() != text:
        from .processes import stop_daemon  # noqa: PLC0415

        stop_daemon(state, "slurmdbd")
    conf.unlink(missing_ok=True)
    conf.touch(mode=0o600)  # slurmdbd refuses a slurmdbd.conf others may read
    conf.write_text(text)
    chown_to(conf, SLURM_USER)
    log_file = layout.logs / "slurmdbd.log"
    start_daemon(state, "slurmdbd", [*programs.slurmdbd, "-D"], log_dir=layout.logs, env=env)
    probe = [programs.client("sacctmgr"), "-n", "-P", "show", "cluster"]
    wait_until(
        "slurmdbd answering",
        lambda: run(probe, env=env, check=False, timeout_s=20).returncode == 0,
        timeout_s=90,
        log_path=log_file,
    )


def ensure_associations(
    programs: slurm_series.SlurmPrograms, env: dict[str, str], cluster: str
) -> None:
    """The cluster, the ground's account, the job user in it, and the bridge's user with
    AdminLevel=Admin (see the module's comment), each added only when missing."""
    sacctmgr = programs.client("sacctmgr")

    def listed(*what: str) -> str:
        return run([sacctmgr, "-n", "-P", "show", *what], env=env, timeout_s=30).stdout

    def add(*what: str) -> None:
        result = run([sacctmgr, "-i", "add", *what], env=env, check=False, timeout_s=30)
        if result.returncode != 0 and "Nothing new added" not in result.stdout + result.stderr:
            raise ProvingGroundError(
                f"sacctmgr add {' '.join(what)}: {(result.stderr or result.stdout).strip()}"
            )

    if cluster not in listed("cluster", "format=cluster").split():
        add("cluster", cluster)
    if ACCOUNT not in listed("account", "format=account").split():
        add("account", ACCOUNT, f"cluster={cluster}", "description=proving ground jobs",
            "organization=proving ground")  # fmt: skip
    users = listed("user", "format=user,adminlevel")
    if f"{JOB_USER}|" not in users:
        add("user", JOB_USER, f"account={ACCOUNT}", f"cluster={cluster}")
    if f"{BRIDGE_USER}|Administrator" not in users:
        if f"{BRIDGE_USER}|" in users:
            run([sacctmgr, "-i", "modify", "user", BRIDGE_USER, "set", "adminlevel=Admin"],
                env=env, timeout_s=30)  # fmt: skip
        else:
            add("user", BRIDGE_USER, f"account={ACCOUNT}", f"cluster={cluster}",
                "adminlevel=Admin")  # fmt: skip
