"""Talk to slurmctld through Slurm's own commands (``scontrol``, ``sinfo``).

All Slurm I/O of the bridge goes through :class:`SlurmCli`: argv lists with a timeout, stderr
captured, failures translated into :mod:`bridge.errors` at this edge:

* the command timed out, or slurmctld could not be reached → :class:`TransientBackendError`
  (retried here a few times; note that Slurm's client already spends ~9 s retrying the
  connection before it reports "Unable to contact slurm controller");
* Slurm refused the request ("Invalid node name specified", "Invalid node state specified",
  "Invalid input: ...") → :class:`InvalidInput`;
* anything else → :class:`BackendError`.

The Slurm release is probed once (``scontrol --version``, which reads slurm.conf but does not
contact slurmctld) and chooses the node listing: ``scontrol show nodes --json`` from 23.02 on
(24.11: data_parser v0.0.42, 26.05: v0.0.45), ``sinfo --json --all`` on 22.05, whose scontrol
rejects ``--json`` ("unrecognized option") and whose sinfo still lists each node with its reason.
Slurm 22.05 hides powered-down ``State=CLOUD`` nodes from every listing unless slurm.conf has
``PrivateData=cloud`` (``--all`` does not help).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_fixed,
)

from bridge.adapters.call_counters import CallCounters, error_kind
from bridge.adapters.slurm import parse
from bridge.domain import hostlist
from bridge.domain.job_failure import SlurmJob
from bridge.domain.nodes import SlurmNode
from bridge.domain.slurm_version import SlurmVersion, parse_slurm_version
from bridge.errors import BackendError, BridgeError, InvalidInput, TransientBackendError

log = logging.getLogger(__name__)

#: stderr fragments meaning slurmctld was not reachable (or did not answer in time).
_TRANSIENT_MARKERS: Final = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "connect failure",
    "Zero Bytes were transmitted",
    "Transport endpoint is not connected",
    "slurmctld not responding",
)
#: stderr fragments meaning Slurm understood the request and refused it.
_INVALID_MARKERS: Final = (
    "Invalid node name",
    "Invalid node state",
    "Invalid input",
    "Unable to parse",
)
#: Nodes (or jobs) per ``scontrol update``: even uncompressible names keep its argv far under
#: ARG_MAX (1,000 names of 30 characters are 30 kB; Linux allows 2 MB, and 128 kB per argument).
_UPDATE_BATCH: Final = 1000
#: Characters of the node list of one ``scontrol show nodes``: half of what Linux takes in one
#: argument (MAX_ARG_STRLEN, 128 kB). A pool that compresses (``cpu-[0-9999]``) is one read; a
#: pool of names that do not (``cpu-a,gpu-x,...``) is a read per 64 kB of them.
_NODE_LIST_CHARS: Final = 64 * 1024
#: What Slurm 22.05's scontrol says to ``--json``.
_NO_JSON_MARKER: Final = "unrecognized option '--json'"
#: The job states in which a job holds its nodes (squeue --states; a powering-up job is
#: CONFIGURING): what a fail-fast looks at.
_HOLDING_JOB_STATES: Final = "CONFIGURING,RUNNING,SUSPENDED,COMPLETING,STAGE_OUT"

_Item = TypeVar("_Item")
_T = TypeVar("_T")

#: The ``backend`` label of this adapter's commands.
BACKEND: Final = "slurm"


class SlurmCli:
    """Slurm's JSON CLI behind a small typed interface.

    ``bin_dir`` holds ``scontrol`` and ``sinfo`` (absolute paths are used because
    Slurm hooks run with no ``PATH``); ``conf`` is passed as ``SLURM_CONF`` when set.
    """

    def __init__(
        self,
        bin_dir: str = "/usr/bin",
        timeout_s: float = 10.0,
        conf: str | None = None,
        *,
        attempts: int = 3,
        retry_wait_s: float = 0.5,
        counters: CallCounters | None = None,
    ) -> None:
        self._bin_dir = Path(bin_dir)
        self._timeout_s = timeout_s
        self._conf = conf
        self._attempts = attempts
        self._retry_wait_s = retry_wait_s
        #: Hears of every command's retries and final error (the bridge's metrics).
        self.counters = counters
        # Probed on first use; a failed probe is tried again next time.
        self._version: SlurmVersion | None = None
        # The last names :meth:`list_nodes` compressed, and the arguments it made of them: every
        # pass asks for the same pools' nodes, and 10,000 names take 15 ms to compress.
        self._node_args: tuple[tuple[str, ...], list[str]] = ((), [])

    def version(self) -> SlurmVersion:
        """The Slurm release of ``bin_dir`` (``scontrol --version``), probed once.

        Raises :class:`~bridge.domain.slurm_version.SlurmVersionError` (a :class:`BackendError`)
        when the output is not a version, or the error of running scontrol.
        """
        if self._version is None:
            self._version = parse_slurm_version(self._run(self._argv("scontrol", "--version")))
        return self._version

    def list_nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        """Every node slurmctld knows, one entry per node, powered-down CLOUD nodes included;
        with ``names``, only those of them Slurm knows (read by hostlist: 0.06 s for 100 of
        10,000 nodes, not 1.5 s for all, measured on 26.05). A name slurm.conf lacks (a pool
        may name more nodes than slurm.conf defines) is left out, never an error."""
        if names is None:
            return self._list_every_node()
        wanted = set(names)
        if not wanted:
            return []
        if not self.version().scontrol_lists_nodes_as_json:
            # 22.05's sinfo --json has no filter: main() dumps the nodes before it looks at
            # --nodes (src/sinfo/sinfo.c: exit(dump_data()); opts.c only checks that the list
            # parses), and the dump is openapi/v0.0.38's handler of /nodes/, which loads every
            # node. So one listing, kept to ``names`` here; unknown names cannot matter.
            return [n for n in self._list_every_node() if n.name in wanted]
        # scontrol loads every node from slurmctld, then keeps, for each name of the list, the
        # node of that name if it has one (src/scontrol/info_node.c, scontrol_print_node_list,
        # its mime_type branch; the same in 23.02, 24.11 and 26.05): unknown names are skipped
        # silently, exit status 0; none known gives "nodes": []. Only without --json does it say
        # "Node x not found" and exit 1.
        nodes: list[SlurmNode] = []
        # In the order given, not the set's: a pool's names in order join into ranges as they
        # come, and 10,000 of them compress in 0.03 s instead of 0.14 s.
        for names_expr in self._node_list_args(names):
            argv = self._argv("scontrol", "show", "nodes", names_expr, "--json")
            nodes += self._fetch_nodes(argv)
        return [n for n in nodes if n.name in wanted]

    def update_nodes(self, names: Sequence[str], *, state: str, reason: str | None = None) -> None:
        """Run ``scontrol update nodename=<hostlist> state=<state> [reason=<reason>]`` (one
        process per :data:`_UPDATE_BATCH` nodes, see :meth:`_update_in_batches`)."""
        if not names:
            return
        if not state or any(c.isspace() for c in state):
            raise InvalidInput(f"invalid Slurm node state {state!r}")
        settings = [f"state={state}"]
        if reason is not None:
            # One argv element: scontrol takes the whole "reason=..." word, spaces included.
            settings.append(f"reason={reason}")
        self._update_nodes_in_batches(names, settings)

    def set_node_addresses(self, addresses: Mapping[str, str]) -> None:
        """Point each node's NodeAddr at its address (``scontrol update nodename=a,b
        nodeaddr=x,y``: Slurm pairs the two lists in order, so no hostlist compression)."""
        for batch in _batches(list(addresses.items())):
            for name, address in batch:
                if not address or any(c.isspace() or c == "," for c in address):
                    raise InvalidInput(f"invalid address {address!r} for node {name}")
            argv = self._argv(
                "scontrol",
                "update",
                "nodename=" + ",".join(name for name, _ in batch),
                "nodeaddr=" + ",".join(address for _, address in batch),
            )
            self._run(argv)
            log.info(
                "scontrol update nodeaddr: %s",
                ", ".join(f"{name}={address}" for name, address in batch),
            )

    def set_node_comment(self, names: Sequence[str], comment: str) -> None:
        """Set (or with ``""`` clear) the nodes' Comment (batched as :meth:`update_nodes`)."""
        if names:
            self._update_nodes_in_batches(names, [f"comment={comment}"])

    def jobs_on_nodes(self, names: Sequence[str]) -> list[SlurmJob]:
        """The jobs holding any of ``names`` now (``squeue --noheader --nodelist=<hostlist>
        --states=<holding> --Format=...``): filtered by slurmctld on every series, four short
        fields a job. (22.05's ``squeue --json`` ignores every filter and printed every job of
        the cluster, pending ones too: 252 MiB of JSON at 10,000 large jobs, read on the
        failure path.) Kept here too: only jobs whose nodes touch ``names``.
        """
        if not names:
            return []
        argv = self._argv(
            "squeue",
            "--noheader",
            f"--nodelist={hostlist.compress(names)}",
            f"--states={_HOLDING_JOB_STATES}",
            f"--Format={parse.JOB_FORMAT}",
        )
        wanted = set(names)
        jobs = parse.parse_job_lines(self._run(argv), _show(argv))
        return [job for job in jobs if not wanted.isdisjoint(job.node_names)]

    def set_jobs_admin_comment(self, job_ids: Sequence[int], comment: str) -> None:
        """``scontrol update jobid=<id>,<id>,... admincomment=<comment>`` (one argv element:
        spaces kept), one process per :data:`_UPDATE_BATCH` jobs.

        scontrol takes a comma list of job ids and updates them one by one, going on past a job
        slurmctld refuses: it prints "<error> for job <id>" for that one and exits 1 at the end
        (src/scontrol/update_job.c, scontrol_update_job with _is_job_id and _next_job_id, the
        same from 22.05 to 26.05). So a failure raised here may leave the other jobs updated.
        """
        ids = [str(job_id) for job_id in dict.fromkeys(job_ids)]
        batches = [",".join(batch) for batch in _batches(ids)]
        self._update_in_batches("jobid", "jobs", batches, [f"admincomment={comment}"])

    def show_config(self) -> dict[str, str]:
        """The running slurmctld's configuration (``scontrol show config``; 22.05 has no JSON
        form of it): key → value as printed, e.g. ``ResumeProgram`` → ``/usr/lib/.../resume``."""
        return parse_show_config(self._run(self._argv("scontrol", "show", "config")))

    # --- internals ------------------------------------------------------------------------------

    def _node_list_args(self, names: Sequence[str]) -> list[str]:
        """``names`` as hostlists of at most :data:`_NODE_LIST_CHARS` (the last call's again
        when the names are the same)."""
        key = tuple(names)
        last, args = self._node_args
        if key != last:
            args = list(hostlist.compress_within(key, _NODE_LIST_CHARS))
            self._node_args = (key, args)
        return args

    def _list_every_node(self) -> list[SlurmNode]:
        if self.version().scontrol_lists_nodes_as_json:
            return self._fetch_nodes(self._argv("scontrol", "show", "nodes", "--json"))
        nodes = self._fetch_nodes(self._argv("sinfo", "--json", "--all"))
        if not nodes:
            log.warning(
                "sinfo --json lists no nodes; Slurm 22.05 hides powered-down CLOUD nodes unless "
                "slurm.conf sets PrivateData=cloud"
            )
        return nodes

    def _update_nodes_in_batches(self, names: Sequence[str], settings: Sequence[str]) -> None:
        """``scontrol update nodename=<hostlist> <settings>``, one process per
        :data:`_UPDATE_BATCH` nodes."""
        batches = [hostlist.compress(batch) for batch in _batches(names)]
        self._update_in_batches("nodename", "nodes", batches, settings)

    def _update_in_batches(
        self, key: str, noun: str, batches: Sequence[str], settings: Sequence[str]
    ) -> None:
        """``scontrol update <key>=<batch> <settings>`` for each batch (a hostlist of nodes, or
        a comma list of job ids: ``noun``).

        A batch Slurm refuses does not stop the others; when some failed, the error raised (the
        first failure's class) names the batches left unchanged. Slurm unreachable stops at
        once: the remaining batches would only wait for the same timeout.
        """
        failures: list[tuple[str, BridgeError]] = []
        skipped: Sequence[str] = ()
        for index, batch in enumerate(batches):
            try:
                self._run(self._argv("scontrol", "update", f"{key}={batch}", *settings))
            except BridgeError as e:
                failures.append((batch, e))
                if isinstance(e, TransientBackendError):
                    skipped = batches[index + 1 :]
                    break
                continue
            log.info("scontrol update %s=%s %s", noun, batch, " ".join(settings))
        if not failures:
            return
        if len(batches) == 1:
            raise failures[0][1]
        raise _batch_failure(noun, failures, skipped) from failures[0][1]

    def _argv(self, command: str, *args: str) -> list[str]:
        return [str(self._bin_dir / command), *args]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self._conf is not None:
            env["SLURM_CONF"] = self._conf
        return env

    def _run(self, argv: list[str]) -> str:
        return self._with_retries(argv, lambda: self._run_once(argv)).decode(errors="replace")

    def _fetch(self, argv: list[str]) -> dict[str, Any]:
        """Run a JSON command and decode it; errors Slurm reports inside it count as failures."""
        return self._with_retries(argv, lambda: self._document(self._run_once(argv), argv))

    def _fetch_nodes(self, argv: list[str]) -> list[SlurmNode]:
        """Run a node listing and parse it. The listing (24 MB at 10,000 nodes in 24.11) is
        decoded node by node into only the fields we read, and that document is freed before the
        collector resumes, so no collection ever walks it."""
        shown = _show(argv)

        def attempt() -> list[SlurmNode]:
            out = self._run_once(argv)
            with parse.collector_paused():
                # The document is a temporary of this call: freed before the pause ends.
                return parse.parse_nodes(self._document(out, argv, parse.load_node_listing), shown)

        return self._with_retries(argv, attempt)

    def _with_retries(self, argv: list[str], attempt: Callable[[], _T]) -> _T:
        """``attempt()``, transient failures tried again; retries and the final error counted."""

        def before_sleep(state: RetryCallState) -> None:
            log.warning(
                "retrying %s after: %s", _show(argv), state.outcome and state.outcome.exception()
            )
            if self.counters is not None:
                self.counters.backend_retry(BACKEND)

        retrying = Retrying(
            retry=retry_if_exception_type(TransientBackendError),
            stop=stop_after_attempt(self._attempts),
            wait=wait_fixed(self._retry_wait_s),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(attempt)
        except BridgeError as e:
            if self.counters is not None:
                self.counters.backend_error(BACKEND, error_kind(e))
            raise

    def _run_once(self, argv: list[str]) -> bytes:
        """stdout as bytes: listings are decoded from them directly (no 24 MB text copy)."""
        shown = _show(argv)
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=self._timeout_s,
                env=self._env(),
                check=True,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise TransientBackendError(f"{shown}: timed out after {self._timeout_s:g} s") from e
        except subprocess.CalledProcessError as e:
            stderr = _text(e.stderr).strip() or _text(e.stdout).strip()
            message = f"{shown}: exit status {e.returncode}: {stderr}"
            if any(marker in stderr for marker in _TRANSIENT_MARKERS):
                raise TransientBackendError(message) from e
            if any(marker in stderr for marker in _INVALID_MARKERS) or _NO_JSON_MARKER in stderr:
                raise InvalidInput(message) from e
            raise BackendError(message) from e
        except OSError as e:
            raise BackendError(f"{shown}: cannot run: {e}") from e
        return done.stdout

    def _document(
        self,
        out: bytes,
        argv: list[str],
        load: Callable[[bytes, str], dict[str, Any]] = parse.load_document,
    ) -> dict[str, Any]:
        doc = load(out, _show(argv))
        errors = parse.reported_errors(doc)
        if errors:
            # 22.05 sinfo/squeue exit 0 and report "Unspecified error" inside the document when
            # slurmctld is unreachable: the one cause seen, so treat it as transient.
            raise TransientBackendError(f"{_show(argv)}: Slurm reported: {'; '.join(errors)}")
        return doc


#: Where Slurm's commands look for slurm.conf when neither the config nor SLURM_CONF says.
DEFAULT_SLURM_CONF: Final = "/etc/slurm/slurm.conf"


def slurm_user_from_conf(text: str) -> str:
    """``SlurmUser`` as slurm.conf sets it (Slurm's default is root); the last setting wins."""
    user = "root"
    for line in text.splitlines():
        key, sep, value = line.split("#", 1)[0].partition("=")
        if sep and key.strip().lower() == "slurmuser" and value.strip():
            user = value.strip().split()[0]
    return user


def read_slurm_user(conf: str | None) -> str:
    """SlurmUser from the slurm.conf slurmctld reads (``conf``, else $SLURM_CONF, else Slurm's
    default path): read from the file so the bridge knows it before slurmctld answers."""
    path = Path(conf or os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF)
    try:
        return slurm_user_from_conf(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as e:
        raise BackendError(f"cannot read SlurmUser from {path}: {e.strerror}") from e


def parse_show_config(text: str) -> dict[str, str]:
    """``Key = value`` lines of ``scontrol show config``; ``(null)`` becomes ``""``. The first
    occurrence of a key wins (later sections, e.g. cgroup.conf's, may repeat names)."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        key = key.strip()
        if sep and key and " " not in key and key not in settings:
            value = value.strip()
            settings[key] = "" if value == "(null)" else value
    return settings


def _batches(items: Sequence[_Item]) -> Iterator[Sequence[_Item]]:
    for start in range(0, len(items), _UPDATE_BATCH):
        yield items[start : start + _UPDATE_BATCH]


def _batch_failure(
    noun: str, failures: Sequence[tuple[str, BridgeError]], skipped: Sequence[str]
) -> BridgeError:
    """One error for a multi-batch update: which nodes (or jobs: ``noun``) failed and why,
    which were not tried. Its class is the first failure's (transient when Slurm could not be
    reached)."""
    message = "; ".join(f"{noun} {batch} not updated: {error}" for batch, error in failures)
    if skipped:
        message += f"; {noun} {','.join(skipped)} not tried"
    return type(failures[0][1])(message)


def _text(output: bytes | None) -> str:
    return output.decode(errors="replace") if output else ""


def _show(argv: Sequence[str]) -> str:
    """The command as a person would type it (program name without its directory)."""
    return " ".join([Path(argv[0]).name, *argv[1:]])
