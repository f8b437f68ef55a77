"""Render the slurm.conf lines that declare the bridge's nodes, partitions and power saving.

The same pools drive the pods and these lines, so Slurm's idea of a node (CPUs, memory, features)
and the pod that backs it cannot drift apart. The text is meant for an ``Include`` at the end of
an existing slurm.conf, so it is scoped to the bridge:

- power-save *timing* (SuspendTime, SuspendTimeout, ResumeTimeout) sits on the bridge's
  ``PartitionName`` lines (Slurm 21.08+), so the site's own nodes keep the site's settings;
- the only globals written by default are the three programs (there is one of each per
  cluster);
- list-valued globals the bridge needs entries in (``SlurmctldParameters``, ``GresTypes``,
  ``SlurmdParameters``, ``PrivateData``) are *not* written: an ``Include``d line replaces the
  site's whole line, so a copy would freeze the site's value as it was at render time and
  silently undo the site's later edits. The fragment names the entries the site's own lines
  must hold (:func:`required_list_entries`), and ``--check``/doctor verify them
  (:func:`missing_list_entries`). Only a slurm.conf generated whole every time (the in-cluster
  image) asks for the lines (``write_list_globals``);
- anything else global (TreeWidth, rates, ReturnToService, a default partition, a global
  SuspendTime) is written only when asked for.

Timeouts for pods behind a cluster autoscaler: a node must register before its ResumeTimeout,
so ``resume_timeout`` > ``schedule_timeout_s`` (autoscaler scale-up, checked here) + image pull
+ slurmd start-up and registration. With a 300 s schedule timeout, a 1-2 minute cold image pull
and ~30 s for slurmd, 600 s leaves a margin; the bridge fails a node with Kubernetes' reason
long before that when Kubernetes says no, so a generous ResumeTimeout costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bridge.domain.pools import NodePool, PoolSet
from bridge.errors import ConfigError

#: The Slurm series this renders for (Debian's bookworm, trixie and sid).
SUPPORTED_SERIES = ("22.05", "24.11", "26.05")

#: What the bridge needs in SlurmctldParameters, added to the site's own entries:
#: enable_configless  pods run ``slurmd --conf-server`` and fetch slurm.conf from slurmctld;
#: idle_on_node_suspend  a suspended node goes back to idle~ instead of staying down/drained.
REQUIRED_SLURMCTLD_PARAMETERS: tuple[str, ...] = ("enable_configless", "idle_on_node_suspend")
#: Before 23.02 slurmctld takes a cloud node's address from its registration only with this;
#: 23.02+ always does and logs the flag as defunct.
CLOUD_REG_ADDRS = "cloud_reg_addrs"

#: Globals whose value is a comma-separated list: merged with the site's, compared as sets.
LIST_GLOBALS = frozenset({"SlurmctldParameters", "SlurmdParameters", "PrivateData", "GresTypes"})
#: The globals a default render writes.
DEFAULT_GLOBALS = ("ResumeProgram", "SuspendProgram", "ResumeFailProgram")


def series_of(version: str) -> str:
    """``"22.05"`` from ``22.05``, ``22.05.8`` or ``slurm-wlm 22.05.8``; refuses other series."""
    found = re.search(r"(\d+)\.(\d+)", version)
    if not found:
        raise ConfigError(f"slurm_version: no version in {version!r}")
    series = f"{int(found.group(1))}.{int(found.group(2)):02d}"
    if series not in SUPPORTED_SERIES:
        raise ConfigError(
            f"slurm_version: {series} is not supported (supported: {', '.join(SUPPORTED_SERIES)})"
        )
    return series


def _at_least(series: str, major: int, minor: int) -> bool:
    a, b = series.split(".")
    return (int(a), int(b)) >= (major, minor)


def split_list(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Entries of a comma-separated slurm.conf value; ``(null)`` and blanks are none."""
    if value is None:
        return ()
    words = value.split(",") if isinstance(value, str) else list(value)
    return tuple(w.strip() for w in words if w.strip() and w.strip() != "(null)")


def merge_list(site: Iterable[str], ours: Iterable[str]) -> tuple[str, ...]:
    """The site's entries in its order, then ours it lacks; for ``key=value`` the site's wins."""
    merged = list(site)
    keys = {w.split("=", 1)[0].lower() for w in merged}
    for word in ours:
        key = word.split("=", 1)[0].lower()
        if key not in keys:
            merged.append(word)
            keys.add(key)
    return tuple(merged)


def required_list_entries(
    pools: PoolSet,
    *,
    slurm_version: str,
    config_overrides: bool = False,
    private_data_cloud: bool = False,
) -> dict[str, tuple[str, ...]]:
    """The entries the bridge needs in the site's list-valued globals, by global:
    SlurmctldParameters always (:data:`REQUIRED_SLURMCTLD_PARAMETERS`, ``cloud_reg_addrs``
    before 23.02), GresTypes when a pool has Gres, SlurmdParameters with ``config_overrides``,
    PrivateData with ``private_data_cloud`` (22.05 only)."""
    series = series_of(slurm_version)
    if private_data_cloud and _at_least(series, 23, 2):
        raise ConfigError(
            f"private_data_cloud: PrivateData=cloud is not a value Slurm {series} knows "
            "(it shows CLOUD nodes anyway); only 22.05 needs it"
        )
    params = list(REQUIRED_SLURMCTLD_PARAMETERS)
    if not _at_least(series, 23, 2):
        params.insert(0, CLOUD_REG_ADDRS)
    required: dict[str, tuple[str, ...]] = {"SlurmctldParameters": tuple(params)}
    gres_types = sorted({word.split(":", 1)[0] for pool in pools for word in pool.gres})
    if gres_types:
        required["GresTypes"] = tuple(gres_types)
    if config_overrides:
        required["SlurmdParameters"] = ("config_overrides",)
    if private_data_cloud:
        required["PrivateData"] = ("cloud",)
    return required


@dataclass(frozen=True)
class MissingEntries:
    """Entries the bridge needs that a list-valued global of the running config lacks."""

    key: str
    missing: tuple[str, ...]
    live: str  # the running value ("" when unset)

    def __str__(self) -> str:
        return (
            f"{self.key}: lacks {','.join(self.missing)} (running: {self.live or '(not set)'}); "
            f"add them to the site's own {self.key} line"
        )


def missing_list_entries(
    required: Mapping[str, Sequence[str]], live: Mapping[str, str]
) -> list[MissingEntries]:
    """What each required list global lacks in the running config ``live`` (``scontrol show
    config``); entries compare by name, case-insensitively (``key=value`` by its key)."""
    found = []
    for key, entries in required.items():
        value = live.get(key) or ""
        value = "" if value == "(null)" else value
        have = {w.split("=", 1)[0].lower() for w in split_list(value)}
        lacking = tuple(e for e in entries if e.split("=", 1)[0].lower() not in have)
        if lacking:
            found.append(MissingEntries(key, lacking, value))
    return found


def _program(name: str, path: str) -> str:
    # Slurm execs the path as is: no arguments, no shell, and blanks would end the value.
    if not path.startswith("/") or any(c.isspace() for c in path):
        raise ConfigError(f"{name}: must be an absolute path without blanks, got {path!r}")
    return path


def _seconds(name: str, value: int, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return value


def node_line(pool: NodePool) -> str:
    """``NodeName=... State=CLOUD`` for one pool."""
    words = [f"NodeName={pool.nodes}", f"CPUs={pool.cpus}", f"RealMemory={pool.real_memory_mb}"]
    if pool.sockets is not None:
        words += [
            f"Sockets={pool.sockets}",
            f"CoresPerSocket={pool.cores_per_socket}",
            f"ThreadsPerCore={pool.threads_per_core}",
        ]
    if pool.tmp_disk_mb is not None:
        words.append(f"TmpDisk={pool.tmp_disk_mb}")
    if pool.features:
        words.append("Features=" + ",".join(pool.features))
    if pool.gres:
        words.append("Gres=" + ",".join(pool.gres))
    if pool.weight is not None:
        words.append(f"Weight={pool.weight}")
    words.append("State=CLOUD")
    return " ".join(words)


def render_slurm_conf(
    pools: PoolSet,
    *,
    resume_program: str,
    suspend_program: str,
    resume_fail_program: str,
    slurm_version: str = "24.11",
    suspend_time: int = 300,
    suspend_timeout: int = 30,
    resume_timeout: int = 600,
    global_timeouts: bool = False,
    global_suspend_time_infinite: bool = False,
    resume_rate: int | None = None,
    suspend_rate: int | None = None,
    config_overrides: bool = False,
    private_data_cloud: bool = False,
    tree_width: int | None = None,
    default_partition: str | None = None,
    return_to_service: int | None = None,
    job_ready_program: str | None = None,
    site_prolog_slurmctld: str = "",
    write_list_globals: bool = False,
    site_slurmctld_parameters: Sequence[str] = (),
    site_slurmd_parameters: Sequence[str] = (),
    site_private_data: Sequence[str] = (),
    site_gres_types: Sequence[str] = (),
    source: str = "the bridge configuration",
) -> str:
    """The slurm.conf text for ``pools`` with power saving wired to the bridge's hooks.

    Times are seconds and go on the bridge's partitions. List-valued globals are not written:
    comments name the entries the site's own lines must hold (:func:`required_list_entries`:
    SlurmctldParameters; GresTypes for pools with Gres; SlurmdParameters with
    ``config_overrides``, which makes Slurm trust the configured CPUs/RealMemory, since slurmd
    in a pod sees the host's hardware; PrivateData with ``private_data_cloud``, 22.05 only,
    which hides CLOUD nodes from sinfo/scontrol without it). ``write_list_globals`` writes them
    instead, each the ``site_*`` list plus ours: only for a slurm.conf generated whole every
    time. Optional globals, each written only when set: ``global_timeouts`` (the three times
    globally as well: every node of the cluster), ``global_suspend_time_infinite``
    (``SuspendTime=INFINITE``: no node outside the bridge's partitions is powered down),
    ``resume_rate``/``suspend_rate`` (0: unlimited), ``tree_width``, ``default_partition``
    (``Default=YES`` on that bridge partition), ``return_to_service``, ``job_ready_program``
    (``PrologSlurmctld``: slurm_plugins/job_ready, which returns once a job's nodes are up, so
    the job starts then and not at slurmctld's next periodic check; refused when the site runs
    another PrologSlurmctld, ``site_prolog_slurmctld``).
    """
    series = series_of(slurm_version)
    if not pools.pools:
        raise ConfigError("pools: no pools to render")
    partitions = pools.partitions()
    if default_partition is not None and default_partition not in partitions:
        raise ConfigError(
            f"default_partition: {default_partition!r} is none of {', '.join(partitions)}"
        )
    required = required_list_entries(
        pools,
        slurm_version=series,
        config_overrides=config_overrides,
        private_data_cloud=private_data_cloud,
    )
    timing = {
        "SuspendTime": _seconds("suspend_time", suspend_time, 1),
        "SuspendTimeout": _seconds("suspend_timeout", suspend_timeout, 1),
        "ResumeTimeout": _seconds("resume_timeout", resume_timeout, 1),
    }
    for pool in pools:
        # At ResumeTimeout Slurm fails the node itself, with a reason that says nothing; the
        # bridge's own verdict (with Kubernetes' reason) has to come first.
        if pool.schedule_timeout_s >= resume_timeout:
            raise ConfigError(
                f"pool {pool.name!r}: schedule_timeout_s {pool.schedule_timeout_s:g} must be "
                f"shorter than resume_timeout {resume_timeout}, or Slurm gives up first"
            )

    globals_: dict[str, str] = {
        "ResumeProgram": _program("resume_program", resume_program),
        "SuspendProgram": _program("suspend_program", suspend_program),
        "ResumeFailProgram": _program("resume_fail_program", resume_fail_program),
    }
    if write_list_globals:
        site_lists = {
            "SlurmctldParameters": split_list(site_slurmctld_parameters),
            "GresTypes": split_list(site_gres_types),
            "SlurmdParameters": split_list(site_slurmd_parameters),
            "PrivateData": split_list(site_private_data),
        }
        if _at_least(series, 23, 2):  # 23.02+ logs it as an error: drop it from the site's too
            site_lists["SlurmctldParameters"] = tuple(
                w for w in site_lists["SlurmctldParameters"] if w.lower() != CLOUD_REG_ADDRS
            )
        for key, entries in required.items():
            globals_[key] = ",".join(merge_list(site_lists[key], entries))
    globals_.update(
        _optional_globals(
            timing if global_timeouts else {},
            global_suspend_time_infinite=global_suspend_time_infinite,
            resume_rate=resume_rate,
            suspend_rate=suspend_rate,
            tree_width=tree_width,
            return_to_service=return_to_service,
        )
    )
    if job_ready_program is not None:
        prolog = _program("job_ready_program", job_ready_program)
        if site_prolog_slurmctld and site_prolog_slurmctld != prolog:
            raise ConfigError(
                f"job_ready_program: the site already runs PrologSlurmctld="
                f"{site_prolog_slurmctld} (Slurm takes one); call {prolog} at the end of it "
                "(it needs SLURM_JOB_ID and SLURM_JOB_NODELIST) or render without it"
            )
        globals_["PrologSlurmctld"] = prolog

    lines = [
        f"# Generated by slurm-k8s-bridge from {source} for Slurm {series}. Do not edit:",
        "# change the bridge configuration and render again, so Slurm's nodes and the bridge's",
        "# pods agree. Include it at the end of slurm.conf. The globals below are all it sets;",
        "# `render-slurm-conf --check` lists what they would change in the running slurmctld.",
        "",
    ]
    if not write_list_globals:
        lines += [
            "# Not set here, so the site's own lines (and its later edits) stay in force: the",
            "# site's slurm.conf must hold these entries in its own lines (`render-slurm-conf",
            "# --check` and `slurm-k8s-bridge doctor` verify them):",
            *(f"#   {key}: {','.join(entries)}" for key, entries in required.items()),
            "",
        ]
    lines += ["# Globals: Slurm wakes and suspends nodes through the bridge's hooks."]
    lines += [f"{key}={value}" for key, value in globals_.items()]
    lines += ["", "# Nodes: each exists only while its pod runs."]
    lines += [node_line(pool) for pool in pools]
    lines += ["", "# Partitions: power-save timing for the bridge's nodes only."]
    lines += _root_jobs_advice(partitions)
    for name, members in partitions.items():
        words = [f"PartitionName={name}", "Nodes=" + ",".join(pool.nodes for pool in members)]
        if name == default_partition:
            words.append("Default=YES")
        options = dict(members[0].partition_options)  # the same for each (PoolSet's rule)
        options.setdefault("MaxTime", "INFINITE")
        words += [f"{key}={value}" for key, value in options.items()]
        words.append("State=UP")
        words += [f"{key}={value}" for key, value in timing.items()]
        lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def _root_jobs_advice(partitions: Mapping[str, Sequence[NodePool]]) -> list[str]:
    """A comment recommending DisableRootJobs=YES for the partitions whose pools do not set it.
    Recommended, not written: the site decides (and the proving ground's tests submit root
    jobs)."""
    allowed = [
        name
        for name, members in partitions.items()
        if "DisableRootJobs" not in dict(members[0].partition_options)
    ]
    if not allowed:
        return []
    return [
        f"# Recommended for {', '.join(allowed)}: DisableRootJobs=YES (partition_options).",
        "# A job that runs as root in a slurmd pod can read the node's key and forge any uid.",
    ]


def _optional_globals(
    timing: Mapping[str, int],
    *,
    global_suspend_time_infinite: bool,
    resume_rate: int | None,
    suspend_rate: int | None,
    tree_width: int | None,
    return_to_service: int | None,
) -> dict[str, str]:
    """The globals a render writes only when asked for, in the order they are written."""
    found = {key: str(value) for key, value in timing.items()}
    if global_suspend_time_infinite:
        if timing:
            raise ConfigError("global_suspend_time_infinite and global_timeouts exclude each other")
        found["SuspendTime"] = "INFINITE"
    if resume_rate is not None:
        found["ResumeRate"] = str(_seconds("resume_rate", resume_rate))
    if suspend_rate is not None:
        found["SuspendRate"] = str(_seconds("suspend_rate", suspend_rate))
    if tree_width is not None:
        found["TreeWidth"] = str(_seconds("tree_width", tree_width, 1))
    if return_to_service is not None:
        if return_to_service not in (0, 1, 2):
            raise ConfigError(f"return_to_service: must be 0, 1 or 2, got {return_to_service!r}")
        found["ReturnToService"] = str(return_to_service)
    return found


def rendered_globals(text: str) -> dict[str, str]:
    """The global ``Key=value`` lines of a render (not NodeName/PartitionName, not comments)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if key in ("NodeName", "PartitionName"):
            continue
        found[key] = value
    return found


_UNITS = re.compile(r"^(-?\d+) (?:sec|min|nodes/min|percent|usec)$")


def _normal(key: str, value: str | None) -> str | frozenset[str]:
    if value is None or value in ("(null)", ""):
        value = ""
    if key in LIST_GLOBALS:
        return frozenset(w.lower() for w in split_list(value))
    unit = _UNITS.match(value)
    if unit:
        value = unit.group(1)
    if key == "SuspendTime" and value in ("", "NONE", "INFINITE", "-1"):
        return "INFINITE"
    return value


@dataclass(frozen=True)
class GlobalChange:
    """One global the render would change: its live value and the rendered one."""

    key: str
    live: str  # "" when the live config does not set it
    rendered: str


def diff_globals(rendered: Mapping[str, str], live: Mapping[str, str]) -> list[GlobalChange]:
    """The rendered globals whose value differs from the live config's, in render order.

    List-valued globals compare as sets (order and case do not matter to Slurm); units that
    ``scontrol show config`` appends (``sec``, ``nodes/min``) are ignored.
    """
    changes = []
    for key, value in rendered.items():
        now = live.get(key)
        if _normal(key, now) != _normal(key, value):
            changes.append(GlobalChange(key, "" if now in (None, "(null)") else str(now), value))
    return changes
