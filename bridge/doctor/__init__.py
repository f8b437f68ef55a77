"""``slurm-k8s-bridge doctor``: a preflight of an installation, one line per check.

The decisions are pure functions of facts, tested as tables: :mod:`~bridge.doctor.checks`
(credentials, RBAC, objects, Slurm, hook paths, socket, network),
:mod:`~bridge.doctor.slurm_writes` (the bridge's Slurm write rights),
:mod:`~bridge.doctor.images` (the pools' pods: a server-side dry run, image names, the slurmd
image's Slurm series) and :mod:`~bridge.doctor.hook_runtime` (what ResumeProgram really runs).
:mod:`~bridge.doctor.probe` gathers the facts through the adapters and the operating system;
:mod:`~bridge.doctor.interpreter` runs the hooks' Python as slurmctld would.
"""

from bridge.doctor.checks import (
    CORDON_ACCESS,
    Check,
    Owner,
    SocketFacts,
    Status,
    check_cordon_access,
    check_hook_program,
    check_name,
    check_object,
    check_python,
    check_rbac,
    check_route,
    check_site_names,
    check_slurm,
    check_socket,
    failed,
    key_secret,
    missing_access,
    readable_names,
    rule_allows,
    summary,
)
from bridge.doctor.hook_runtime import (
    HookFiles,
    HookRuntime,
    PythonRun,
    check_hook_runtime,
    hook_runtime,
    hooks_env_settings,
)
from bridge.doctor.images import (
    ImageReference,
    accepted_older_releases,
    check_image_names,
    check_pod_admission,
    check_slurmd_series,
    image_series,
    parse_image_reference,
    pod_images,
    release_index,
    series_of_version,
    slurmd_image,
)
from bridge.doctor.probe import probe_hook_files, probe_hooks_python, run_checks
from bridge.doctor.slurm_writes import check_slurm_write, is_refusal, write_probe_node

__all__ = [
    "CORDON_ACCESS",
    "Check",
    "HookFiles",
    "HookRuntime",
    "ImageReference",
    "Owner",
    "PythonRun",
    "SocketFacts",
    "Status",
    "accepted_older_releases",
    "check_cordon_access",
    "check_hook_program",
    "check_hook_runtime",
    "check_image_names",
    "check_name",
    "check_object",
    "check_pod_admission",
    "check_python",
    "check_rbac",
    "check_route",
    "check_site_names",
    "check_slurm",
    "check_slurm_write",
    "check_slurmd_series",
    "check_socket",
    "failed",
    "hook_runtime",
    "hooks_env_settings",
    "image_series",
    "is_refusal",
    "key_secret",
    "missing_access",
    "parse_image_reference",
    "pod_images",
    "probe_hook_files",
    "probe_hooks_python",
    "readable_names",
    "release_index",
    "rule_allows",
    "run_checks",
    "series_of_version",
    "slurmd_image",
    "summary",
    "write_probe_node",
]
