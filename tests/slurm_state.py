"""A job's state read from Slurm's JSON, as the integration and e2e tests ask for it.

``scontrol --json show job`` answers on Slurm >= 23.02; 22.05's scontrol rejects ``--json``, so
``squeue --json`` is asked there. ``job_state`` is a string on 22.05 and a list on 23.02+ (base
state first, then flags); both are reduced to the one word ``scontrol show job`` prints as
``JobState=`` so callers compare against the names they know (``CONFIGURING``, ``COMPLETING``,
``COMPLETED`` ...). Pure apart from the ``run`` callable: no proving-ground imports, so the unit
suite tests it on recorded output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

#: Runs a Slurm command (argv words) and returns its stdout; "" or any non-JSON when it failed.
RunSlurm = Callable[..., str]

#: Flags Slurm's ``job_state_string`` reports instead of the base state, in its order of
#: precedence (src/common/slurm_protocol_defs.c): a running job that still boots its nodes
#: reads CONFIGURING, a finished one still running its epilog reads COMPLETING.
_FLAGS_SHOWN_FIRST = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)


def job_state_in(doc: Mapping[str, Any], job: int) -> str:
    """``job``'s state in a jobs document (``scontrol --json show job``, ``squeue --json``).

    "" when the document does not list the job (it left slurmctld's memory, or never was).
    """
    for entry in doc.get("jobs") or []:
        if entry.get("job_id") != job:
            continue
        state = entry.get("job_state")
        if isinstance(state, str) and state:
            return state.upper()
        if isinstance(state, list) and state and all(isinstance(s, str) for s in state):
            words = [s.upper() for s in state]
            shown = [flag for flag in _FLAGS_SHOWN_FIRST if flag in words[1:]]
            return shown[0] if shown else words[0]
        raise AssertionError(f"job {job}: job_state {state!r} is neither a string nor a list")
    return ""


def job_state(run: RunSlurm, job: int) -> str:
    """``job``'s state from ``scontrol --json show job``, else ``squeue --json`` (Slurm 22.05)."""
    for argv in (
        ("scontrol", "--json", "show", "job", str(job)),
        # --states=all: a finished job is still listed while slurmctld keeps it (MinJobAge).
        ("squeue", "--json", "--states=all", f"--jobs={job}"),
    ):
        try:
            doc = json.loads(run(*argv))
        except json.JSONDecodeError:
            continue  # 22.05 scontrol: "unrecognized option '--json'" on stderr, no stdout
        if isinstance(doc, dict):
            return job_state_in(doc, job)
    return ""
