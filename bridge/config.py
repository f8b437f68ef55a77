"""The bridge's configuration: one YAML file plus ``SKB_*`` environment overrides.

Every error names the file, the line and the field (``bridge.yaml:14: pools[1].cpus: must be a
positive integer, got 'four'``); unknown and duplicate keys are errors, because a typo that passes
silently leaves a default in force that nobody asked for. Input is bounded: numbers are finite and
at most a year of seconds (:data:`MAX_SECONDS`), the file at most :data:`MAX_FILE_SIZE`
characters, its nesting (through YAML aliases too) :data:`MAX_YAML_DEPTH` levels and its values
:data:`MAX_YAML_NODES`; an alias inside its own anchor is an error.

Environment overrides (applied on top of the file; the file's value when unset):

    SKB_CLUSTER_NAME                  cluster_name
    SKB_KUBERNETES_NAMESPACE          kubernetes.namespace
    SKB_KUBERNETES_KUBECONFIG         kubernetes.kubeconfig      ("" = in-cluster credentials)
    SKB_KUBERNETES_CONTEXT            kubernetes.context         ("" = the kubeconfig's current)
    SKB_KUBERNETES_NODE_SERVICE       kubernetes.node_service    ("" = pods get no DNS names)
    SKB_KUBERNETES_CLUSTER_DOMAIN     kubernetes.cluster_domain
    SKB_SLURM_BIN_DIR                 slurm.bin_dir
    SKB_SLURM_CONF                    slurm.conf                 ("" = Slurm's default)
    SKB_SLURM_COMMAND_TIMEOUT_S       slurm.command_timeout_s
    SKB_SLURM_CONF_SERVER             slurm.conf_server
    SKB_SLURM_MUNGE_KEY_SECRET        slurm.munge_key_secret
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

A variable starting ``SKB_KUBERNETES_``, ``SKB_SLURM_`` or ``SKB_BRIDGE_`` that names no field is
an error (a typo); other ``SKB_`` names are left to other parts of the program. Pools have no
overrides: they are structure, not scalars.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

# No types-PyYAML in the dev dependencies yet; the ignore stays valid once they arrive.
import yaml  # type: ignore[import-untyped,unused-ignore]

from bridge.domain.pod_rendering import (
    SLURMD_CONTAINER,
    PodSettings,
    render_pod,
    template_image,
    template_problems,
)
from bridge.domain.pools import NodePool, PoolError, PoolSet, dns_label_problem
from bridge.errors import ConfigError

DEFAULT_PATH = "/etc/slurm-k8s-bridge/bridge.yaml"
ENV_PREFIX = "SKB_"
# Bounds on what the reader accepts, so that a broken or hostile file gives a ConfigError and
# never a RecursionError, an OverflowError at start-up or a reader lost in a YAML alias bomb.
MAX_FILE_SIZE = 4 * 1024 * 1024  # characters; a real file is a few KiB
MAX_YAML_DEPTH = 64  # nesting, counted through aliases; a pod template needs about 12
MAX_YAML_NODES = 100_000  # values after aliases are expanded (a "billion laughs" has 10**9)
MAX_SECONDS = 365 * 24 * 3600.0  # beyond a year a pause is a typo; timedelta/wait overflow later
MAX_COUNT = 2**31 - 1  # integer settings (Slurm's CPUs and MB fit; Python's repr stays cheap)
MAX_CONCURRENCY = 1024

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class KubernetesSettings:
    """Where the pods go and which credentials create them."""

    namespace: str = "slurm"
    kubeconfig: str | None = None  # None: in-cluster service account
    context: str | None = None  # None: the kubeconfig's current context
    #: Headless Service (deploy/kustomize/base) whose domain names every pod; "" for none.
    node_service: str = "slurm-nodes"
    cluster_domain: str = "cluster.local"


@dataclass(frozen=True)
class SlurmSettings:
    """How the bridge runs the Slurm CLI and what slurmd in a pod needs to reach slurmctld."""

    conf_server: str = ""  # host[:port][,host[:port]] for `slurmd --conf-server`; required
    bin_dir: str = "/usr/bin"
    conf: str | None = None  # SLURM_CONF for the CLI; None: Slurm's default
    command_timeout_s: float = 10.0
    munge_key_secret: str = "slurm-munge-key"  # noqa: S105 (the Secret's name)


@dataclass(frozen=True)
class BridgeSettings:
    """The bridge process: where it listens and how it paces its work."""

    socket: str = "/run/slurm-k8s-bridge/bridge.sock"
    socket_mode: int = 0o660
    socket_group: str | None = None
    tcp_listen: str | None = None  # host:port; needs mutual TLS unless on loopback
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    reconcile_interval_s: float = 5.0
    pod_age_guard_s: float = 30.0
    failed_node_hold_s: float = 30.0
    #: A pod still terminating this long past its grace period is force-deleted (its kubelet
    #: is gone; nobody else will confirm the delete, and the node's next pod needs the name).
    terminating_margin_s: float = 15.0
    create_concurrency: int = 16
    log_format: str = "text"
    #: Who may call over the Unix socket, as user names or uids (checked with SO_PEERCRED).
    #: root, the bridge's own user and Slurm's SlurmUser are always allowed.
    allowed_callers: tuple[str, ...] = ()
    #: Over TCP: client certificate CNs/SANs allowed to call; empty allows any certificate
    #: signed by ``tls_client_ca``.
    tls_client_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class BridgeConfig:
    """Everything the bridge is configured with; ``source`` is where it was read from."""

    pools: PoolSet
    cluster_name: str = "slurm"
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    bridge: BridgeSettings = field(default_factory=BridgeSettings)
    source: str = field(default="", compare=False)

    def pod_settings(self) -> PodSettings:
        """What :func:`~bridge.domain.pod_rendering.render_pod` needs from this configuration."""
        return PodSettings(
            namespace=self.kubernetes.namespace,
            cluster_name=self.cluster_name,
            conf_server=self.slurm.conf_server,
            munge_key_secret=self.slurm.munge_key_secret,
            node_service=self.kubernetes.node_service,
            cluster_domain=self.kubernetes.cluster_domain,
        )

    def to_dict(self) -> dict[str, Any]:
        """The configuration as the YAML file would hold it (loads back to an equal config)."""
        result: dict[str, Any] = {"cluster_name": self.cluster_name}
        for name in _SECTIONS:
            section = getattr(self, name)
            result[name] = {f.name: getattr(section, f.name) for f in fields(section)}
        result["bridge"]["socket_mode"] = f"0{self.bridge.socket_mode:o}"
        result["pools"] = [_pool_to_dict(pool) for pool in self.pools]
        return result

    def to_yaml(self) -> str:
        """:meth:`to_dict` as YAML text."""
        text: str = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)
        return text


def _pool_to_dict(pool: NodePool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": pool.name,
        "nodes": pool.nodes,
        "cpus": pool.cpus,
        "real_memory_mb": pool.real_memory_mb,
        "partition": pool.partition,
        "image": pool.image,
        "features": list(pool.features),
        "gres": list(pool.gres),
        "weight": pool.weight,
        "schedule_timeout_s": pool.schedule_timeout_s,
        "image_pull_timeout_s": pool.image_pull_timeout_s,
        "pod_template": _plain(pool.pod_template),
    }
    return data


def _plain(value: Any) -> Any:
    # The pool keeps its template behind a read-only proxy that yaml cannot dump.
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Field checks: each returns a problem or None.

_Check = Callable[[Any], "str | None"]
_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+)(:(?P<port>\d{1,5}))?")
_LOOPBACK_NAMES = frozenset({"localhost"})


def _optional_dns_label(value: str) -> str | None:
    return None if value == "" else dns_label_problem(value)


def _abs_path(value: str) -> str | None:
    return None if value.startswith("/") else f"must be an absolute path, got {_show(value)}"


def _host_port(value: str, *, port_required: bool) -> str | None:
    match = _HOST_PORT.fullmatch(value)
    if not match or (port_required and match["port"] is None):
        form = "host:port" if port_required else "host[:port]"
        return f"must be {form}, got {_show(value)}"
    if match["port"] is not None and int(match["port"]) > 65535:
        return f"port {match['port']} is out of range in {_show(value)}"
    return None


def _conf_server(value: str) -> str | None:
    # slurmd accepts a comma-separated list: the primary controller, then backups.
    for entry in value.split(","):
        problem = _host_port(entry.strip(), port_required=False)
        if problem:
            return problem + " (e.g. 10.213.0.1:6817)"
    return None


def _tcp_listen(value: str) -> str | None:
    return _host_port(value, port_required=True)


def _log_format(value: str) -> str | None:
    return None if value in ("text", "json") else f"must be text or json, got {_show(value)}"


def _label_value(value: str) -> str | None:
    # cluster_name is a label value on every pod; a DNS label is the portable subset.
    return dns_label_problem(value)


def _subdomain(value: str) -> str | None:
    if len(value) <= 253 and all(dns_label_problem(part) is None for part in value.split(".")):
        return None
    return f"{_show(value)} is not a valid Kubernetes object name (DNS-1123 subdomain)"


def _caller_names(value: tuple[str, ...]) -> str | None:
    for word in value:
        if not word.isdigit() and not re.fullmatch(r"[a-z_][a-z0-9_.-]*\$?", word):
            return f"{word!r} is neither a user name nor a uid"
    return None


def _non_empty(value: str) -> str | None:
    return None if value else "must not be empty"


@dataclass(frozen=True)
class _Spec:
    """How to read one scalar field."""

    kind: str  # str | posint | posfloat | nonnegfloat | mode | words
    optional: bool = False  # may be null (None)
    check: _Check | None = None
    maximum: float | None = None  # posint: MAX_COUNT; seconds: MAX_SECONDS


_SECTIONS: dict[str, tuple[type[Any], dict[str, _Spec]]] = {
    "kubernetes": (
        KubernetesSettings,
        {
            "namespace": _Spec("str", check=dns_label_problem),
            "kubeconfig": _Spec("str", optional=True, check=_non_empty),
            "context": _Spec("str", optional=True, check=_non_empty),
            "node_service": _Spec("str", check=_optional_dns_label),
            "cluster_domain": _Spec("str", check=_subdomain),
        },
    ),
    "slurm": (
        SlurmSettings,
        {
            "bin_dir": _Spec("str", check=_abs_path),
            "conf": _Spec("str", optional=True, check=_abs_path),
            "command_timeout_s": _Spec("posfloat"),
            "conf_server": _Spec("str", check=_conf_server),
            "munge_key_secret": _Spec("str", check=_subdomain),
        },
    ),
    "bridge": (
        BridgeSettings,
        {
            "socket": _Spec("str", check=_abs_path),
            "socket_mode": _Spec("mode"),
            "socket_group": _Spec("str", optional=True, check=_non_empty),
            "tcp_listen": _Spec("str", optional=True, check=_tcp_listen),
            "tls_cert": _Spec("str", optional=True, check=_abs_path),
            "tls_key": _Spec("str", optional=True, check=_abs_path),
            "tls_client_ca": _Spec("str", optional=True, check=_abs_path),
            "reconcile_interval_s": _Spec("posfloat"),
            "pod_age_guard_s": _Spec("nonnegfloat"),
            "failed_node_hold_s": _Spec("nonnegfloat"),
            "terminating_margin_s": _Spec("nonnegfloat"),
            "create_concurrency": _Spec("posint", maximum=MAX_CONCURRENCY),
            "log_format": _Spec("str", check=_log_format),
            "allowed_callers": _Spec("words", check=_caller_names),
            "tls_client_names": _Spec("words"),
        },
    ),
}
_CLUSTER_NAME = _Spec("str", check=_label_value)
_TOP_KEYS = ("cluster_name", *_SECTIONS, "pools")
_POOL_KEYS = (
    "name",
    "nodes",
    "cpus",
    "real_memory_mb",
    "partition",
    "image",
    "features",
    "gres",
    "weight",
    "schedule_timeout_s",
    "image_pull_timeout_s",
    "pod_template",
)
_POOL_REQUIRED = ("name", "nodes", "cpus", "real_memory_mb")


class _ProblemError(Exception):
    """A field's value is wrong; the reader adds file, line and path."""


def _convert(spec: _Spec, value: Any) -> Any:
    """Check a value read from YAML against ``spec``; returns the value to keep."""
    if value is None:
        if spec.optional:
            return None
        raise _ProblemError("must be set (null is not allowed here)")
    if spec.kind == "str":
        if not isinstance(value, str):
            raise _ProblemError(f"must be a string, got {_show(value)}")
    elif spec.kind == "posint":
        top = int(spec.maximum or MAX_COUNT)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= top:
            raise _ProblemError(f"must be a positive integer up to {top}, got {_show(value)}")
    elif spec.kind in ("posfloat", "nonnegfloat"):
        value = _number(spec.kind, value, spec.maximum or MAX_SECONDS)
    elif spec.kind == "mode":
        value = _mode(value)
    elif spec.kind == "words":
        value = _words(value)
    if spec.check is not None:
        problem = spec.check(value)
        if problem:
            raise _ProblemError(problem)
    return value


def _number(kind: str, value: Any, top: float) -> float:
    positive = kind == "posfloat"
    what = f"a positive number up to {top:g}" if positive else f"a number from 0 to {top:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _ProblemError(f"must be {what} (seconds), got {_show(value)}")
    # NaN fails every comparison; a huge int is compared as an int (float() would overflow).
    if not (0 <= value <= top) or (positive and value == 0):
        raise _ProblemError(f"must be {what} (seconds), got {_show(value)}")
    return float(value)


def _show(value: Any) -> str:
    """``repr`` for an error message, short, and safe for integers of any size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _words(value: Any) -> tuple[str, ...]:
    """A list of names (or a comma-separated string, as an environment variable gives it)."""
    if isinstance(value, str):
        return tuple(word.strip() for word in value.split(",") if word.strip())
    if not isinstance(value, list) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in value
    ):
        raise _ProblemError(f"must be a list of names, got {_show(value)}")
    return tuple(str(v) for v in value)


def _mode(value: Any) -> int:
    if isinstance(value, str):
        try:
            value = int(value.removeprefix("0o"), 8)
        except ValueError:
            raise _ProblemError(f"must be an octal mode like 0660, got {_show(value)}") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        # YAML reads 660 as decimal; 0660 is the octal the user meant.
        raise _ProblemError(f"must be an octal mode like 0660, got {_show(value)}")
    return value


def _from_env(spec: _Spec, text: str) -> Any:
    """Turn an environment variable's text into the value the YAML would have held."""
    if text == "" and spec.optional:
        return None
    if spec.kind == "posint":
        try:
            return int(text)
        except ValueError:
            raise _ProblemError(f"must be a positive integer, got {_show(text)}") from None
    if spec.kind in ("posfloat", "nonnegfloat"):
        try:
            return float(text)
        except ValueError:
            raise _ProblemError(f"must be a number (seconds), got {_show(text)}") from None
    return text


def dotted(path: Path) -> str:
    """``("pools", 1, "cpus")`` → ``pools[1].cpus``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


# ---------------------------------------------------------------------------------------------
# YAML with line numbers.


class _Loader(yaml.SafeLoader):
    """SafeLoader that composes no alias into its own node and nests at most MAX_YAML_DEPTH.

    Aliases stay allowed (deploy/local/bridge.yaml shares a pod template with ``&real``), but
    ``a: &x [*x]`` would be a cycle that every later walk recurses into forever, and PyYAML's
    composer itself recurses once per level of nesting.
    """

    def __init__(self, stream: str, source: str) -> None:
        super().__init__(stream)
        self._source = source
        self._open_anchors: set[str] = set()
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        where = f"{self._source}:{event.start_mark.line + 1}"
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise ConfigError(
                    f"{where}: invalid YAML: alias *{event.anchor} is inside its own anchor"
                )
            node: yaml.Node | None = super().compose_node(parent, index)
            return node
        if self._depth >= MAX_YAML_DEPTH:
            raise ConfigError(
                f"{where}: invalid YAML: nested more than {MAX_YAML_DEPTH} levels deep"
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.add(anchor)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.discard(anchor)
        return node


def _index_lines(
    node: yaml.Node, path: Path, lines: dict[Path, int], source: str, budget: list[int]
) -> None:
    """Record the 1-based line of every key and item; reject duplicate and non-string keys.

    Aliases make the tree larger than the text: ``budget`` counts the values still allowed
    (MAX_YAML_NODES in all) and the path's length the depth through aliases.
    """
    budget[0] -= 1
    if budget[0] < 0 or len(path) > MAX_YAML_DEPTH:
        limit = f"{MAX_YAML_NODES} values" if budget[0] < 0 else f"{MAX_YAML_DEPTH} levels"
        where = dotted(path[:4]) + ("..." if len(path) > 4 else "")
        raise ConfigError(
            f"{source}:{node.start_mark.line + 1}: {where or 'top level'}: "
            f"the document expands (through its aliases) to more than {limit}"
        )
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                where = dotted(path) or "top level"
                raise ConfigError(f"{source}:{line}: {where}: keys must be strings")
            key = key_node.value
            if key in seen:
                raise ConfigError(
                    f"{source}:{line}: {dotted((*path, key))}: duplicate key "
                    f"(first on line {seen[key]})"
                )
            seen[key] = line
            lines[(*path, key)] = line
            _index_lines(value_node, (*path, key), lines, source, budget)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _index_lines(item, (*path, index), lines, source, budget)


def _read_yaml(text: str, source: str) -> tuple[Any, dict[Path, int]]:
    if len(text) > MAX_FILE_SIZE:
        raise ConfigError(
            f"{source}: {len(text)} characters, more than the limit of {MAX_FILE_SIZE}"
        )
    try:
        # The reader checks the text at once: a control character fails here, not in parsing.
        loader = _Loader(text, source)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {str(e).splitlines()[0]}") from e
    try:
        node = loader.get_single_node()
        if node is None:
            return {}, {}
        lines: dict[Path, int] = {(): node.start_mark.line + 1}
        _index_lines(node, (), lines, source, [MAX_YAML_NODES])
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"{where}: invalid YAML: {e.problem or e.context}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {e}") from e
    except (ValueError, OverflowError, IndexError, TypeError) as e:
        # PyYAML's safe constructor converts scalars with int(), float(), datetime and base64
        # and trusts what it gets: "2026-02-30", an integer of more than 4300 digits or an
        # empty "!!int" raise these from inside it. Nothing else runs in this block.
        raise ConfigError(
            f"{source}: invalid YAML value: {type(e).__name__}: {_show(str(e))}"
        ) from e
    finally:
        loader.dispose()


class _Reader:
    """Turns problems at a path into ConfigErrors that point at the file line or variable."""

    def __init__(self, source: str, lines: Mapping[Path, int], env_paths: Mapping[Path, str]):
        self.source = source
        self.lines = lines
        self.env_paths = env_paths

    def error(self, path: Path, message: str) -> ConfigError:
        variable = self.env_paths.get(path)
        if variable is not None:
            return ConfigError(f"environment {variable}: {dotted(path)}: {message}")
        where = self.source
        # Fall back to the nearest enclosing key, but not to the document: "line 1" for a
        # missing section would point at an unrelated line.
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                where = f"{self.source}:{line}"
                break
        return ConfigError(f"{where}: {dotted(path) or 'top level'}: {message}")

    def mapping(self, value: Any, path: Path, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(path, f"must be a mapping, got {_show(value)}")
        for key in value:
            if key not in allowed:
                raise self.error((*path, key), f"unknown key; known keys: {', '.join(allowed)}")
        return value

    def scalar(self, spec: _Spec, value: Any, path: Path) -> Any:
        try:
            return _convert(spec, value)
        except _ProblemError as e:
            raise self.error(path, str(e)) from None


# ---------------------------------------------------------------------------------------------
# Building the configuration.


def _env_overrides(
    environ: Mapping[str, str], data: dict[str, Any]
) -> tuple[dict[str, Any], dict[Path, str]]:
    """Apply ``SKB_*`` variables to the parsed file; returns the new data and what came from env."""
    known: dict[str, tuple[tuple[str, ...], _Spec]] = {
        f"{ENV_PREFIX}CLUSTER_NAME": (("cluster_name",), _CLUSTER_NAME)
    }
    for section, (_, specs) in _SECTIONS.items():
        for name, spec in specs.items():
            known[f"{ENV_PREFIX}{section}_{name}".upper()] = ((section, name), spec)
    section_prefixes = tuple(f"{ENV_PREFIX}{section.upper()}_" for section in _SECTIONS)
    result = dict(data)
    origins: dict[Path, str] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        if variable not in known:
            if variable.startswith(section_prefixes):
                names = sorted(k for k in known if k.startswith(section_prefixes))
                raise ConfigError(
                    f"environment {variable}: names no configuration field "
                    f"(known: {', '.join(names)})"
                )
            continue
        path, spec = known[variable]
        try:
            value = _from_env(spec, environ[variable])
        except _ProblemError as e:
            raise ConfigError(f"environment {variable}: {dotted(path)}: {e}") from None
        origins[path] = variable
        if len(path) == 1:
            result[path[0]] = value
        else:
            current = result.get(path[0])
            result[path[0]] = {**(current if isinstance(current, Mapping) else {}), path[1]: value}
    return result, origins


def _section(reader: _Reader, data: Mapping[str, Any], name: str) -> Any:
    cls, specs = _SECTIONS[name]
    raw = reader.mapping(data.get(name), (name,), tuple(specs))
    values = {key: reader.scalar(specs[key], value, (name, key)) for key, value in raw.items()}
    return cls(**values)


def _check_listeners(reader: _Reader, bridge: BridgeSettings) -> None:
    tls = {
        "tls_cert": bridge.tls_cert,
        "tls_key": bridge.tls_key,
        "tls_client_ca": bridge.tls_client_ca,
    }
    given = [name for name, value in tls.items() if value is not None]
    if given and len(given) != len(tls):
        missing = [name for name in tls if name not in given]
        raise reader.error(
            ("bridge", given[0]),
            "mutual TLS needs tls_cert, tls_key and tls_client_ca together; "
            f"missing {', '.join(missing)}",
        )
    if given and bridge.tcp_listen is None:
        raise reader.error(("bridge", given[0]), "TLS applies only to tcp_listen, which is not set")
    if bridge.tcp_listen is not None and not given and not _is_loopback(bridge.tcp_listen):
        # Anyone who reaches the port could create and delete pods: require client certificates.
        raise reader.error(
            ("bridge", "tcp_listen"),
            "a non-loopback TCP listener needs tls_cert, tls_key and tls_client_ca (mutual TLS)",
        )


def _is_loopback(host_port: str) -> bool:
    host = host_port.rsplit(":", 1)[0].strip("[]")
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _word_list(reader: _Reader, value: Any, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        # Slurm writes Features=a,b; accept the same spelling.
        return tuple(word.strip() for word in value.split(",") if word.strip())
    if not isinstance(value, list):
        raise reader.error(path, f"must be a list of strings, got {_show(value)}")
    for index, word in enumerate(value):
        if not isinstance(word, str):
            raise reader.error((*path, index), f"must be a string, got {_show(word)}")
    return tuple(value)


def _pool(reader: _Reader, value: Any, index: int) -> NodePool:
    path: Path = ("pools", index)
    raw = reader.mapping(value, path, _POOL_KEYS)
    if not raw:
        raise reader.error(path, "a pool needs at least " + ", ".join(_POOL_REQUIRED))
    for key in _POOL_REQUIRED:
        if key not in raw:
            raise reader.error(path, f"{key}: required")
    for key in ("name", "nodes", "partition", "image"):
        if key in raw:
            reader.scalar(_Spec("str"), raw[key], (*path, key))
    for key in ("cpus", "real_memory_mb"):
        reader.scalar(_Spec("posint"), raw[key], (*path, key))
    weight = raw.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int)):
        raise reader.error((*path, "weight"), f"must be an integer, got {_show(weight)}")
    patience = {
        key: reader.scalar(_Spec("posfloat"), raw[key], (*path, key))
        for key in ("schedule_timeout_s", "image_pull_timeout_s")
        if key in raw
    }
    template = raw.get("pod_template") or {}
    if not isinstance(template, Mapping):
        raise reader.error((*path, "pod_template"), f"must be a mapping, got {_show(template)}")
    problems = template_problems(template)
    if problems:
        where, message = problems[0]
        raise reader.error((*path, "pod_template", *where), message)
    image = raw.get("image", "")
    if not image and not template_image(template):
        raise reader.error(
            (*path, "image"),
            f"required (or set the image of the {SLURMD_CONTAINER!r} container in pod_template)",
        )
    try:
        return NodePool.create(
            name=raw["name"],
            nodes=raw["nodes"],
            cpus=raw["cpus"],
            real_memory_mb=raw["real_memory_mb"],
            partition=raw.get("partition"),
            image=image,
            features=_word_list(reader, raw.get("features"), (*path, "features")),
            gres=_word_list(reader, raw.get("gres"), (*path, "gres")),
            pod_template=template,
            weight=weight,
            **patience,
        )
    except PoolError as e:
        raise reader.error((*path, *_field_path(e.field)), e.reason) from None


def _field_path(text: str) -> Path:
    """``features[0]`` → ``("features", 0)``."""
    parts: list[str | int] = []
    for name, number in re.findall(r"([^.\[\]]+)|\[(\d+)\]", text):
        parts.append(int(number) if number else name)
    return tuple(parts)


def _pools(reader: _Reader, value: Any) -> PoolSet:
    if value is None or value == []:
        raise reader.error(("pools",), "at least one pool is required")
    if not isinstance(value, list):
        raise reader.error(("pools",), f"must be a list of pools, got {_show(value)}")
    pools = [_pool(reader, item, index) for index, item in enumerate(value)]
    try:
        return PoolSet(tuple(pools))
    except PoolError as e:
        index = e.pool_index if e.pool_index is not None else 0
        raise reader.error(("pools", index, *_field_path(e.field)), e.reason) from None


def parse_config(
    text: str, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> BridgeConfig:
    """Build a :class:`BridgeConfig` from YAML text and ``SKB_*`` variables (none by default)."""
    data, lines = _read_yaml(text, source)
    return config_from_dict(data, source, environ, lines)


def config_from_dict(
    data: Any,
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
    lines: Mapping[Path, int] | None = None,
) -> BridgeConfig:
    """Build a :class:`BridgeConfig` from already parsed data (the shape of the YAML file)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the file must hold a mapping, got {type(data).__name__}")
    data, env_paths = _env_overrides(environ or {}, dict(data))
    reader = _Reader(source, lines or {}, env_paths)
    reader.mapping(data, (), _TOP_KEYS)
    cluster_name = reader.scalar(
        _CLUSTER_NAME, data.get("cluster_name", "slurm"), ("cluster_name",)
    )
    kubernetes = _section(reader, data, "kubernetes")
    slurm = _section(reader, data, "slurm")
    if not slurm.conf_server:
        raise reader.error(
            ("slurm", "conf_server"),
            "required: the host:port slurmd fetches its configuration from (e.g. 10.213.0.1:6817)",
        )
    bridge = _section(reader, data, "bridge")
    _check_listeners(reader, bridge)
    pools = _pools(reader, data.get("pools"))
    return BridgeConfig(
        pools=pools,
        cluster_name=cluster_name,
        kubernetes=kubernetes,
        slurm=slurm,
        bridge=bridge,
        source=source,
    )


def load_config(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> BridgeConfig:
    """Read the configuration file at ``path``; ``environ`` defaults to the process environment."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as stream:
            text = stream.read(MAX_FILE_SIZE + 1)  # enough for _read_yaml to say it is too big
    except OSError as e:
        raise ConfigError(f"{source}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: not UTF-8 text: {e}") from e
    return parse_config(text, source, os.environ if environ is None else environ)


def check_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> str:
    """Load and fully check the configuration (rendering one pod per pool); returns a summary."""
    config = load_config(path, environ)
    settings = config.pod_settings()
    for pool in config.pools:
        # Rendering exercises the merge of template and overlay the same way the service will.
        render_pod(pool, pool.node_names[0], settings)
    lines = [
        f"{config.source}: OK",
        f"cluster {config.cluster_name}, namespace {config.kubernetes.namespace}, "
        f"conf server {config.slurm.conf_server}",
    ]
    for pool in config.pools:
        image = pool.image or template_image(pool.pod_template)
        lines.append(
            f"pool {pool.name}: {pool.nodes} ({len(pool.node_names)} nodes), "
            f"partition {pool.partition}, {pool.cpus} CPUs, {pool.real_memory_mb} MB, image {image}"
        )
    return "\n".join(lines)
