"""SlurmCli against a fake bin_dir of tiny scripts replaying recorded Slurm output.

This checks argv, environment, timeouts, retries and error translation; runs against real
daemons live in tests/integration.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import bridge.adapters.slurm.cli as cli_module
from bridge.adapters.slurm.cli import SlurmCli
from bridge.domain.hostlist import expand
from bridge.domain.slurm_version import SlurmVersion, SlurmVersionError
from bridge.errors import BackendError, HostlistError, InvalidInput, TransientBackendError
from bridge.runtime.serve import log_slurm_version

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
V22 = DATA / "v22.05"
V24 = DATA / "v24.11"
V26 = DATA / "v26.05"


@dataclass(frozen=True)
class Reply:
    """What a fake command prints and returns; ``fail_first`` calls fail with ``fail_stderr``."""

    stdout: Path | None = None
    stderr: Path | None = None
    rc: int = 0
    sleep_s: float = 0.0
    fail_first: int = 0
    fail_stderr: Path | None = None


class FakeSlurm:
    """A bin_dir whose commands log their argv and SLURM_CONF, then replay a reply."""

    def __init__(self, root: Path) -> None:
        self.bin_dir = root / "bin"
        self.bin_dir.mkdir()
        self.log = root / "calls.log"
        self._root = root

    def command(self, name: str, replies: dict[str, Reply]) -> None:
        """Install ``name``; ``replies`` is keyed by the first argument (``*`` matches any)."""
        lines = [
            "#!/bin/sh",
            f'printf "%s|%s\\n" "${{SLURM_CONF:-}}" "{name} $*" >> {shlex.quote(str(self.log))}',
            'case "$1" in',
        ]
        for key, reply in replies.items():
            count = self._root / f"{name}-{key.strip('*') or 'any'}.count"
            body = []
            if reply.fail_first:
                body += [
                    f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}",
                    f'if [ "$n" -lt {reply.fail_first} ]; then '
                    f"cat {reply.fail_stderr} >&2; exit 1; fi",
                ]
            if reply.sleep_s:
                body.append(f"sleep {reply.sleep_s}")
            if reply.stdout:
                body.append(f"cat {shlex.quote(str(reply.stdout))}")
            if reply.stderr:
                body.append(f"cat {shlex.quote(str(reply.stderr))} >&2")
            body.append(f"exit {reply.rc}")
            lines.append(f"  {key}) " + "; ".join(body) + " ;;")
        lines += ['  *) echo "fake: unexpected $*" >&2; exit 99 ;;', "esac", ""]
        path = self.bin_dir / name
        path.write_text("\n".join(lines))
        path.chmod(0o755)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def fake(tmp_path: Path) -> FakeSlurm:
    return FakeSlurm(tmp_path)


def _cli(fake: FakeSlurm, **kwargs: object) -> SlurmCli:
    options: dict[str, object] = {"timeout_s": 5.0, "retry_wait_s": 0.0, **kwargs}
    return SlurmCli(str(fake.bin_dir), **options)  # type: ignore[arg-type]


#: ``scontrol --version`` as each series printed it (record.py).
VERSION_22 = Reply(stdout=V22 / "scontrol-version.txt")
VERSION_24 = Reply(stdout=V24 / "scontrol-version.txt")
VERSION_26 = Reply(stdout=V26 / "scontrol-version.txt")


@pytest.mark.parametrize(
    ("version", "listing"),
    [
        (VERSION_24, V24 / "scontrol-states.json"),
        (VERSION_26, V26 / "scontrol-states.json"),
    ],
    ids=["24.11", "26.05"],
)
def test_list_nodes_uses_scontrol_json_from_23_02(
    fake: FakeSlurm, version: Reply, listing: Path
) -> None:
    fake.command("scontrol", {"--version": version, "show": Reply(stdout=listing)})
    cli = _cli(fake, conf="/etc/slurm-test/slurm.conf")
    nodes = cli.list_nodes()
    assert [n.display_state for n in nodes][:3] == ["idle~", "alloc#", "alloc"]
    cli.list_nodes()
    assert fake.calls() == [
        "/etc/slurm-test/slurm.conf|scontrol --version",
        *["/etc/slurm-test/slurm.conf|scontrol show nodes --json"] * 2,
    ]


@pytest.mark.parametrize(
    ("version", "listing", "names", "argv"),
    [
        (
            VERSION_26,
            V26 / "scontrol-states.json",
            ["cloud3", "cloud2"],
            "scontrol show nodes cloud[2-3] --json",
        ),
        # A pool may name nodes slurm.conf lacks (cloud9, gpu-x): scontrol skips them, exit 0
        # (info_node.c); the adapter keeps what it was asked for.
        (
            VERSION_24,
            V24 / "scontrol-states.json",
            ["cloud3", "gpu-x", "cloud9", "cloud2"],
            "scontrol show nodes cloud[2-3,9],gpu-x --json",
        ),
        # 22.05's sinfo --json ignores --nodes (it lists every node): one listing, no node
        # list on its command line, kept to the names here.
        (
            VERSION_22,
            V22 / "sinfo-states.json",
            ["cloud3", "cloud2", "cloud9"],
            "sinfo --json --all",
        ),
    ],
    ids=["26.05", "24.11-unknown-names", "22.05"],
)
def test_list_nodes_by_name_reads_only_those(
    fake: FakeSlurm, version: Reply, listing: Path, names: list[str], argv: str
) -> None:
    program, first = argv.split()[:2]
    replies = {first: Reply(stdout=listing)}
    fake.command("scontrol", {"--version": version, **(replies if program == "scontrol" else {})})
    if program != "scontrol":
        fake.command(program, replies)
    cli = _cli(fake)
    assert [n.name for n in cli.list_nodes(names)] == ["cloud2", "cloud3"]
    assert cli.list_nodes([]) == []
    assert fake.calls() == ["|scontrol --version", f"|{argv}"]


def test_list_nodes_of_names_slurm_does_not_know_is_empty_not_an_error(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    # What scontrol prints when no name of the list is known (info_node.c: record_count 0;
    # data_parser's NODES dumper warns "No nodes to dump"): exit 0, an empty "nodes".
    listing = json.loads((V26 / "scontrol-states.json").read_text())
    listing.update(nodes=[], warnings=[{"description": "No nodes to dump"}])
    empty = tmp_path / "none-known.json"
    empty.write_text(json.dumps(listing))
    fake.command("scontrol", {"--version": VERSION_26, "show": Reply(stdout=empty)})
    assert _cli(fake).list_nodes(["gpu-x", "cloud9"]) == []
    assert fake.calls() == ["|scontrol --version", "|scontrol show nodes cloud9,gpu-x --json"]


@pytest.mark.parametrize(
    ("names", "reads"),
    [
        # A pool that compresses is one read however large it is.
        ([f"cpu-{i}" for i in range(20_000)], 1),
        # 114 kB of names that do not compress: a read per 64 kB at most, each name in one.
        ([f"node-{chr(97 + i % 26)}{i}-rack{i % 7}x" for i in range(6000)], 2),
    ],
    ids=["compressible", "uncompressible"],
)
def test_list_nodes_by_name_keeps_each_node_list_far_under_arg_max(
    fake: FakeSlurm, names: list[str], reads: int
) -> None:
    fake.command(
        "scontrol",
        {"--version": VERSION_26, "show": Reply(stdout=V26 / "scontrol-states.json")},
    )
    _cli(fake).list_nodes(names)
    lists = [call.split()[3] for call in fake.calls()[1:]]
    assert len(lists) == reads
    assert all(len(node_list) <= 64 * 1024 for node_list in lists)
    assert sorted(n for node_list in lists for n in expand(node_list)) == sorted(names)


def test_the_same_names_again_are_not_compressed_again(
    fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pass asks for the pools' nodes: their hostlist is made once (15 ms for 10,000)."""
    fake.command(
        "scontrol",
        {"--version": VERSION_26, "show": Reply(stdout=V26 / "scontrol-states.json")},
    )
    compressed: list[int] = []
    real = cli_module.hostlist.compress_within

    def counting(names: Iterable[str], limit: int) -> list[str]:
        names = list(names)
        compressed.append(len(names))
        return real(names, limit)

    monkeypatch.setattr(cli_module.hostlist, "compress_within", counting)
    cli = _cli(fake)
    pools = [f"cpu-{i}" for i in range(10)]
    for names in (pools, list(pools), [*pools, "gpu-0"], pools):
        cli.list_nodes(names)
    assert compressed == [10, 11, 10]
    lists = [call.split()[3] for call in fake.calls()[1:]]
    assert lists == ["cpu-[0-9]", "cpu-[0-9]", "cpu-[0-9],gpu-0", "cpu-[0-9]"]


def test_list_nodes_uses_sinfo_on_22_05(fake: FakeSlurm) -> None:
    fake.command("scontrol", {"--version": VERSION_22})
    fake.command("sinfo", {"--json": Reply(stdout=V22 / "sinfo-states.json")})
    cli = _cli(fake)
    assert len(cli.list_nodes()) == 8
    assert len(cli.list_nodes()) == 8
    assert fake.calls() == [
        "|scontrol --version",
        "|sinfo --json --all",
        "|sinfo --json --all",
    ]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (VERSION_22, SlurmVersion(22, 5, 8)),
        (VERSION_24, SlurmVersion(24, 11, 5)),
        (VERSION_26, SlurmVersion(26, 5, 5)),
    ],
    ids=["22.05", "24.11", "26.05"],
)
def test_version_is_probed_once(fake: FakeSlurm, reply: Reply, expected: SlurmVersion) -> None:
    fake.command("scontrol", {"--version": reply})
    cli = _cli(fake, conf="/c/slurm.conf")
    assert cli.version() == expected
    assert cli.version() == expected
    assert fake.calls() == ["/c/slurm.conf|scontrol --version"]


def test_unparsable_version_is_named_and_probed_again(fake: FakeSlurm, tmp_path: Path) -> None:
    odd = tmp_path / "odd.txt"
    odd.write_text("scontrol: fatal: Could not establish a configuration source\n")
    fake.command("scontrol", {"--version": Reply(stdout=odd)})
    cli = _cli(fake)
    for _ in range(2):
        with pytest.raises(SlurmVersionError, match=r"expected 'slurm <major>\.<minor>\.<patch>'"):
            cli.list_nodes()
    assert fake.calls() == ["|scontrol --version"] * 2


def test_the_app_logs_the_version_once_or_why_not(
    fake: FakeSlurm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.command("scontrol", {"--version": VERSION_26})
    caplog.set_level("INFO", logger="bridge.runtime.serve")
    log_slurm_version(_cli(fake), "/usr/bin")
    assert "Slurm 26.05.5 at /usr/bin" in caplog.text
    no_conf = tmp_path / "no-conf.stderr"
    no_conf.write_text("scontrol: fatal: Could not establish a configuration source\n")
    fake.command("scontrol", {"--version": Reply(stderr=no_conf, rc=1)})
    log_slurm_version(_cli(fake), "/usr/bin")
    assert "Slurm version unknown (probed again on first use): scontrol --version" in caplog.text


def test_22_05_sinfo_reporting_unreachable_with_exit_0_is_retried(fake: FakeSlurm) -> None:
    fake.command("scontrol", {"--version": VERSION_22})
    fake.command("sinfo", {"--json": Reply(stdout=V22 / "sinfo-unreachable.json")})
    with pytest.raises(TransientBackendError, match=r"sinfo --json --all: .*Unspecified error"):
        _cli(fake, attempts=2).list_nodes()
    assert fake.calls().count("|sinfo --json --all") == 2


def test_empty_22_05_listing_warns_about_private_data(
    fake: FakeSlurm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"meta": {}, "errors": [], "nodes": []}')
    fake.command("scontrol", {"--version": VERSION_22})
    fake.command("sinfo", {"--json": Reply(stdout=empty)})
    assert _cli(fake).list_nodes() == []
    assert "PrivateData=cloud" in caplog.text


def test_unreachable_then_recovered_is_retried(fake: FakeSlurm) -> None:
    fake.command(
        "scontrol",
        {
            "--version": VERSION_24,
            "show": Reply(
                stdout=V24 / "scontrol-states.json",
                fail_first=2,
                fail_stderr=V24 / "errors" / "scontrol-unreachable.stderr",
            ),
        },
    )
    assert len(_cli(fake, attempts=3).list_nodes()) == 8
    assert fake.calls() == ["|scontrol --version", *["|scontrol show nodes --json"] * 3]


def test_update_runs_one_scontrol_with_a_hostlist(fake: FakeSlurm) -> None:
    fake.command("scontrol", {"update": Reply()})
    _cli(fake, conf="/c/slurm.conf").update_nodes(
        ["cloud3", "cloud1", "cloud2", "gpu-7"],
        state="down",
        reason="k8s: ImagePullBackOff: Back-off pulling image",
    )
    assert fake.calls() == [
        "/c/slurm.conf|scontrol update nodename=cloud[1-3],gpu-7 state=down "
        "reason=k8s: ImagePullBackOff: Back-off pulling image"
    ]


def _scontrol_failing_for(fake: FakeSlurm, nodename: str, stderr: Path) -> None:
    """An scontrol that logs its calls and fails (with ``stderr``) for one ``nodename=``."""
    script = fake.bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s|%s\\n" "${{SLURM_CONF:-}}" "scontrol $*" >> {shlex.quote(str(fake.log))}\n'
        f'if [ "$2" = {shlex.quote(nodename)} ]; then\n'
        f"  cat {shlex.quote(str(stderr))} >&2; exit 1\n"
        "fi\n"
    )
    script.chmod(0o755)


@pytest.mark.parametrize(
    ("update", "settings"),
    [
        (
            lambda cli, names: cli.update_nodes(names, state="down", reason="k8s: x"),
            "state=down reason=k8s: x",
        ),
        (
            lambda cli, names: cli.set_node_comment(names, "k8s: waiting: y"),
            "comment=k8s: waiting: y",
        ),
    ],
    ids=["state", "comment"],
)
def test_update_of_many_nodes_runs_one_scontrol_per_thousand(
    fake: FakeSlurm, update: Any, settings: str
) -> None:
    fake.command("scontrol", {"update": Reply()})
    update(_cli(fake), [f"n{i}" for i in range(2500)])
    assert fake.calls() == [
        f"|scontrol update nodename={nodes} {settings}"
        for nodes in ("n[0-999]", "n[1000-1999]", "n[2000-2499]")
    ]


@pytest.mark.parametrize(
    ("failing", "error", "calls", "named"),
    [
        # Slurm refused one batch: the others are still updated; the error names the batch.
        (
            "n[1000-1999]",
            InvalidInput,
            3,
            ["nodes n[1000-1999] not updated: scontrol update nodename=n[1000-1999]"],
        ),
        # Slurm unreachable: stop (each retry waits for the same timeout), name what was left.
        (
            "n[0-999]",
            TransientBackendError,
            2,
            ["nodes n[0-999] not updated", "nodes n[1000-1999],n[2000-2499] not tried"],
        ),
    ],
    ids=["refused", "unreachable"],
)
def test_update_of_many_nodes_names_the_nodes_a_failed_batch_left(
    fake: FakeSlurm,
    failing: str,
    error: type[Exception],
    calls: int,
    named: list[str],
) -> None:
    stderr = {
        InvalidInput: V24 / "errors" / "update-invalid-node-name.stderr",
        TransientBackendError: V24 / "errors" / "update-unreachable.stderr",
    }[error]
    _scontrol_failing_for(fake, f"nodename={failing}", stderr)
    with pytest.raises(error) as caught:
        _cli(fake, attempts=2).update_nodes([f"n{i}" for i in range(2500)], state="resume")
    assert type(caught.value) is error
    for words in named:
        assert words in str(caught.value)
    assert stderr.read_text().splitlines()[0].strip() in str(caught.value)
    assert caught.value.__cause__ is not None
    assert len(fake.calls()) == calls


def test_update_reason_is_one_argument(fake: FakeSlurm, tmp_path: Path) -> None:
    # The fake records "$*", which cannot show word boundaries: count arguments instead.
    script = fake.bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$#" > {tmp_path / "argc"}\n')
    script.chmod(0o755)
    _cli(fake).update_nodes(["n1"], state="drain", reason="two words; $(and) `quotes`")
    assert (tmp_path / "argc").read_text().strip() == "4"


def test_update_without_reason_and_with_no_names(fake: FakeSlurm) -> None:
    fake.command("scontrol", {"update": Reply()})
    cli = _cli(fake)
    cli.update_nodes([], state="resume")
    cli.update_nodes(["n1"], state="power_down_force")
    assert fake.calls() == ["|scontrol update nodename=n1 state=power_down_force"]


@pytest.mark.parametrize(
    ("stderr", "error", "calls"),
    [
        (V22 / "errors" / "update-invalid-node-name.stderr", InvalidInput, 1),
        (V24 / "errors" / "update-invalid-node-name.stderr", InvalidInput, 1),
        (V22 / "errors" / "update-invalid-state-transition.stderr", InvalidInput, 1),
        (V24 / "errors" / "update-bogus-state.stderr", InvalidInput, 1),
        (V22 / "errors" / "update-unreachable.stderr", TransientBackendError, 3),
        (V24 / "errors" / "update-unreachable.stderr", TransientBackendError, 3),
        (V26 / "errors" / "update-invalid-node-name.stderr", InvalidInput, 1),
        # 26.05 says "Invalid node state transition" where 24.11 said "... specified".
        (V26 / "errors" / "update-invalid-state-transition.stderr", InvalidInput, 1),
        (V26 / "errors" / "update-bogus-state.stderr", InvalidInput, 1),
        (V26 / "errors" / "update-unreachable.stderr", TransientBackendError, 3),
        (None, BackendError, 1),
    ],
    ids=lambda v: f"{v.parent.parent.name}/{v.name}" if isinstance(v, Path) else str(v),
)
def test_update_failures_are_translated(
    fake: FakeSlurm, stderr: Path | None, error: type[Exception], calls: int
) -> None:
    fake.command("scontrol", {"update": Reply(stderr=stderr, rc=1)})
    with pytest.raises(error) as caught:
        _cli(fake, attempts=3).update_nodes(["cloud1"], state="resume")
    assert type(caught.value) is error
    message = str(caught.value)
    assert "scontrol update nodename=cloud1 state=resume" in message
    if stderr is not None:
        assert stderr.read_text().splitlines()[0].strip() in message
    assert caught.value.__cause__ is not None
    assert len(fake.calls()) == calls


def test_timeout_is_transient_and_bounded(fake: FakeSlurm) -> None:
    fake.command("scontrol", {"*": Reply(sleep_s=5)})
    started = time.monotonic()
    with pytest.raises(TransientBackendError, match=r"timed out after 0.2 s") as caught:
        _cli(fake, timeout_s=0.2, attempts=2).update_nodes(["n1"], state="resume")
    assert time.monotonic() - started < 3
    assert caught.value.__cause__ is not None
    assert len(fake.calls()) == 2


def test_missing_binary_is_a_backend_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="cannot run") as caught:
        SlurmCli(str(tmp_path), attempts=1).list_nodes()
    assert not isinstance(caught.value, TransientBackendError)


@pytest.mark.parametrize(
    ("names", "state", "error"),
    [
        (["cloud[1-2"], "down", HostlistError),
        (["n1"], "", InvalidInput),
        (["n1"], "a b", InvalidInput),
    ],
)
def test_update_rejects_bad_input_before_running(
    fake: FakeSlurm, names: list[str], state: str, error: type[Exception]
) -> None:
    fake.command("scontrol", {"*": Reply()})
    with pytest.raises(error):
        _cli(fake).update_nodes(names, state=state)
    assert fake.calls() == []


def test_jobs_on_nodes_asks_squeue_for_the_hostlist_and_holding_states_only(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    # Filtered by slurmctld (every series honours --nodelist/--states in this form); a job
    # touching none of the names (an older slurmctld's answer) is dropped here too.
    lines = tmp_path / "squeue.txt"
    lines.write_text("1|CONFIGURING|cloud2|(null)\n2|RUNNING|cloud3|(null)\n")
    fake.command("squeue", {"--noheader": Reply(stdout=lines)})
    jobs = _cli(fake).jobs_on_nodes(["cloud2", "cloud1"])
    assert [(job.job_id, job.nodes) for job in jobs] == [(1, "cloud2")]
    assert fake.calls() == [
        "|squeue --noheader --nodelist=cloud[1-2] "
        "--states=CONFIGURING,RUNNING,SUSPENDED,COMPLETING,STAGE_OUT "
        "--Format=JobId:0|,State:0|,NodeList:0|,admin_comment:0"
    ]


def test_jobs_on_no_nodes_runs_nothing(fake: FakeSlurm) -> None:
    assert _cli(fake).jobs_on_nodes([]) == []
    assert fake.calls() == []


@pytest.mark.parametrize("series", [V22, V24, V26], ids=["22.05", "24.11", "26.05"])
def test_jobs_read_while_slurmctld_is_unreachable_is_retried(fake: FakeSlurm, series: Path) -> None:
    fake.command(
        "squeue",
        {"--noheader": Reply(rc=1, stderr=series / "errors" / "update-unreachable.stderr")},
    )
    with pytest.raises(TransientBackendError, match="Unable to contact slurm controller"):
        _cli(fake, attempts=2).jobs_on_nodes(["cloud1"])
    assert len(fake.calls()) == 2


def test_admin_comment_is_one_argument_for_all_jobs(fake: FakeSlurm, tmp_path: Path) -> None:
    script = fake.bin_dir / "scontrol"
    script.write_text(
        f'#!/bin/sh\necho "$#" > {tmp_path / "argc"}\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\n'
    )
    script.chmod(0o755)
    _cli(fake).set_jobs_admin_comment([7, 12, 7], "k8s: Forbidden: e2e: cpu-1 may not run; $(x)")
    assert (tmp_path / "argc").read_text().strip() == "3"
    assert (tmp_path / "argv").read_text().splitlines() == [
        "update",
        "jobid=7,12",
        "admincomment=k8s: Forbidden: e2e: cpu-1 may not run; $(x)",
    ]


def test_admin_comment_of_many_jobs_runs_one_scontrol_per_thousand(fake: FakeSlurm) -> None:
    fake.command("scontrol", {"update": Reply()})
    _cli(fake).set_jobs_admin_comment(range(1, 2501), "k8s: x")
    assert fake.calls() == [
        f"|scontrol update jobid={','.join(map(str, range(first, first + count)))} "
        "admincomment=k8s: x"
        for first, count in ((1, 1000), (1001, 1000), (2001, 500))
    ]


def test_admin_comment_a_slurm_refuses_names_the_jobs(fake: FakeSlurm, tmp_path: Path) -> None:
    # scontrol went on past job 8 and said so (update_job.c: "<error> for job <id>", exit 1).
    stderr = tmp_path / "refused.stderr"
    stderr.write_text("Invalid job id specified for job 8\n")
    fake.command("scontrol", {"update": Reply(stderr=stderr, rc=1)})
    with pytest.raises(BackendError, match=r"jobid=7,8 .*Invalid job id specified for job 8"):
        _cli(fake).set_jobs_admin_comment([7, 8], "k8s: x")
