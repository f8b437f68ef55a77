"""Reading the bridge's configuration: one YAML file plus ``SKB_*`` environment overrides.

The values it yields are :mod:`bridge.settings`' types; this package is only the reader:
:mod:`~bridge.config.yaml_lines` reads YAML with line numbers, :mod:`~bridge.config.schema`
says (with pydantic) what the file may hold, :mod:`~bridge.config.field_rules` how each scalar is
read, and :mod:`~bridge.config.reader` puts them together.

Every error names the file, the line and the field (``bridge.yaml:14: pools[1].cpus: must be a
positive integer, got 'four'``); unknown and duplicate keys are errors, because a typo that passes
silently leaves a default in force that nobody asked for. Input is bounded: numbers are finite and
at most a year of seconds; the file's size, nesting and expanded values are bounded too (see
:mod:`~bridge.config.yaml_lines`).

Environment overrides (applied on top of the file; the file's value when unset):

    SKB_CLUSTER_NAME                  cluster_name
    SKB_KUBERNETES_NAMESPACE          kubernetes.namespace
    SKB_KUBERNETES_KUBECONFIG         kubernetes.kubeconfig      ("" = in-cluster credentials)
    SKB_KUBERNETES_CONTEXT            kubernetes.context         ("" = the kubeconfig's current)
    SKB_KUBERNETES_NODE_SERVICE       kubernetes.node_service    ("" = pods get no DNS names)
    SKB_KUBERNETES_CLUSTER_DOMAIN     kubernetes.cluster_domain
    SKB_KUBERNETES_GANG_SCHEDULING    kubernetes.gang_scheduling (auto or off)
    SKB_SLURM_BIN_DIR                 slurm.bin_dir
    SKB_SLURM_CONF                    slurm.conf                 ("" = Slurm's default)
    SKB_SLURM_COMMAND_TIMEOUT_S       slurm.command_timeout_s
    SKB_SLURM_CONF_SERVER             slurm.conf_server
    SKB_SLURM_MUNGE_KEY_SECRET        slurm.munge_key_secret
    SKB_SLURM_AUTH                    slurm.auth                 (munge or slurm)
    SKB_SLURM_SLURM_KEY_SECRET        slurm.slurm_key_secret
    SKB_BRIDGE_SOCKET                 bridge.socket
    SKB_BRIDGE_SOCKET_MODE            bridge.socket_mode         (octal, e.g. 0660)
    SKB_BRIDGE_SOCKET_GROUP           bridge.socket_group        ("" = unset)
    SKB_BRIDGE_TCP_LISTEN             bridge.tcp_listen          ("" = no TCP listener)
    SKB_BRIDGE_TLS_CERT / _TLS_KEY / _TLS_CLIENT_CA              ("" = unset)
    SKB_BRIDGE_RECONCILE_INTERVAL_S   bridge.reconcile_interval_s
    SKB_BRIDGE_POD_AGE_GUARD_S        bridge.pod_age_guard_s
    SKB_BRIDGE_FAILED_NODE_HOLD_S     bridge.failed_node_hold_s
    SKB_BRIDGE_TERMINATING_MARGIN_S   bridge.terminating_margin_s
    SKB_BRIDGE_CREATE_CONCURRENCY     bridge.create_concurrency
    SKB_BRIDGE_LOG_FORMAT             bridge.log_format          (text or json)
    SKB_BRIDGE_METRICS_ADDRESS        bridge.metrics_address     ("" = no metrics endpoint)

A variable starting ``SKB_KUBERNETES_``, ``SKB_SLURM_`` or ``SKB_BRIDGE_`` that names no field is
an error (a typo); other ``SKB_`` names are left to other parts of the program. Pools have no
overrides: they are structure, not scalars.
"""

from __future__ import annotations

from bridge.config.reader import (
    ENV_PREFIX,
    check_config,
    config_from_dict,
    config_to_yaml,
    load_config,
    parse_config,
)
from bridge.settings import DEFAULT_CONFIG_PATH as DEFAULT_PATH

__all__ = [
    "DEFAULT_PATH",
    "ENV_PREFIX",
    "check_config",
    "config_from_dict",
    "config_to_yaml",
    "load_config",
    "parse_config",
]
