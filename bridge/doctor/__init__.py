"""``slurm-k8s-bridge doctor``: a preflight of an installation, one line per check.

:mod:`~bridge.doctor.checks` decides (pure functions of facts, tested as tables);
:mod:`~bridge.doctor.probe` gathers the facts through the adapters and the operating system.
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
    check_slurm,
    check_socket,
    failed,
    hook_python,
    key_secret,
    missing_access,
    readable_names,
    rule_allows,
    summary,
)
from bridge.doctor.probe import python_version, run_checks

__all__ = [
    "CORDON_ACCESS",
    "Check",
    "Owner",
    "SocketFacts",
    "Status",
    "check_cordon_access",
    "check_hook_program",
    "check_name",
    "check_object",
    "check_python",
    "check_rbac",
    "check_route",
    "check_slurm",
    "check_socket",
    "failed",
    "hook_python",
    "key_secret",
    "missing_access",
    "python_version",
    "readable_names",
    "rule_allows",
    "run_checks",
    "summary",
]
