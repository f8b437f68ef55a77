"""From YAML text and ``SKB_*`` variables to a :class:`~bridge.settings.BridgeConfig`.

pydantic checks the file against :mod:`bridge.config.schema`; this module feeds it the
environment overrides and turns its findings into one :class:`~bridge.errors.ConfigError` that
names the file, the line and the field, or the variable the value came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from bridge.config.field_rules import FieldProblem, Rule
from bridge.config.schema import (
    SECTION_MODELS,
    BreakerSection,
    BridgeSection,
    ConfigFile,
    PoolEntry,
)
from bridge.config.yaml_lines import MAX_FILE_SIZE, LineIndex, read_yaml, show
from bridge.domain.field_path import FieldPath, dotted
from bridge.domain.pod_rendering import render_pod
from bridge.domain.pod_templates import template_image
from bridge.errors import ConfigError
from bridge.settings import BridgeConfig, BridgeSettings, KubernetesSettings, SlurmSettings

ENV_PREFIX = "SKB_"


def _env_rule(info: FieldInfo) -> Rule:
    for metadata in info.metadata:
        rule = getattr(metadata, "func", None)
        if isinstance(rule, Rule):
            return rule
    raise LookupError(f"no Rule in {info!r}")  # a scalar field declared without field_rules


def _env_fields() -> dict[str, tuple[FieldPath, Rule]]:
    """``SKB_BRIDGE_SOCKET`` → (``("bridge", "socket")``, how to read it) for every scalar."""
    known: dict[str, tuple[FieldPath, Rule]] = {
        f"{ENV_PREFIX}CLUSTER_NAME": (
            ("cluster_name",),
            _env_rule(ConfigFile.model_fields["cluster_name"]),
        )
    }
    for section, model in SECTION_MODELS.items():
        for name, info in model.model_fields.items():
            if name == "circuit_breaker":
                continue  # a mapping: only from the file
            known[f"{ENV_PREFIX}{section}_{name}".upper()] = ((section, name), _env_rule(info))
    return known


def _env_overrides(
    environ: Mapping[str, str], data: dict[str, Any]
) -> tuple[dict[str, Any], dict[FieldPath, str]]:
    """Apply ``SKB_*`` variables to the parsed file; returns the new data and what came from env."""
    known = _env_fields()
    section_prefixes = tuple(f"{ENV_PREFIX}{section.upper()}_" for section in SECTION_MODELS)
    result = dict(data)
    origins: dict[FieldPath, str] = {}
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
        path, rule = known[variable]
        try:
            value = rule.from_env(environ[variable])
        except FieldProblem as e:
            raise ConfigError(f"environment {variable}: {dotted(path)}: {e.message}") from None
        origins[path] = variable
        if len(path) == 1:
            result[str(path[0])] = value
        else:
            section, name = str(path[0]), path[1]
            current = result.get(section)
            result[section] = {**(current if isinstance(current, Mapping) else {}), name: value}
    return result, origins


def _model_at(path: FieldPath) -> type[BaseModel] | None:
    """The model that reads the mapping at ``path`` (None inside free-form values)."""
    if path == ():
        return ConfigFile
    if len(path) == 1 and path[0] in SECTION_MODELS:
        return SECTION_MODELS[str(path[0])]
    if len(path) == 2 and path[0] == "pools" and isinstance(path[1], int):
        return PoolEntry
    if path[-1:] == ("circuit_breaker",) and _model_at(path[:-1]) in (BridgeSection, PoolEntry):
        return BreakerSection
    return None


#: The order a pool's fields are checked in (the file lists them differently): strings first.
_POOL_CHECK_ORDER = (
    "name",
    "nodes",
    "partition",
    "image",
    "cpus",
    "real_memory_mb",
    "weight",
    "schedule_timeout_s",
    "image_pull_timeout_s",
    "pod_template",
    "features",
    "gres",
    "circuit_breaker",
)


def _reading_order(error: ErrorDetails, data: Mapping[str, Any]) -> tuple[int, ...]:
    """Sort key: the error the reader reports first, of all pydantic found.

    At each level unknown keys come first, then missing ones, then the rest: the top level and
    a pool in the order of their fields (the sections before the pools that use them), a
    section's settings in the order the file gives them.
    """
    loc = tuple(error["loc"])
    order: list[int] = []
    for depth, part in enumerate(loc):
        if isinstance(part, int):
            order.append(part)
            continue
        model = _model_at(loc[:depth])
        section = data.get(str(loc[0])) if depth == 1 and loc[0] in SECTION_MODELS else None
        last = depth == len(loc) - 1
        if last and error["type"] == "extra_forbidden":
            order.append(-2)
        elif last and error["type"] == "missing":
            order.append(-1)
        elif isinstance(section, Mapping) and part in section:
            order.append(list(section).index(part))
        elif model is PoolEntry and part in _POOL_CHECK_ORDER:
            order.append(_POOL_CHECK_ORDER.index(part))
        elif model is not None and part in model.model_fields:
            order.append(list(model.model_fields).index(part))
        else:
            order.append(0)
    return tuple(order)


def _problem(error: ErrorDetails) -> tuple[FieldPath, str]:
    """Where an error of pydantic's is and what to say about it, in this project's words."""
    loc: FieldPath = tuple(error["loc"])
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, FieldProblem):
        return (*loc, *cause.path), cause.message
    if error["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = ", ".join(model.model_fields) if model is not None else ""
        return loc, f"unknown key; known keys: {known}"
    if error["type"] == "missing":
        return loc[:-1], f"{loc[-1]}: required"
    return loc, f"{error['msg']}, got {show(error['input'])}"


class _Locator:
    """Turns a problem at a path into a ConfigError that points at the file line or variable."""

    def __init__(
        self, source: str, lines: Mapping[FieldPath, int], origins: Mapping[FieldPath, str]
    ) -> None:
        self.source = source
        self.lines = lines
        self.origins = origins

    def error(self, path: FieldPath, message: str) -> ConfigError:
        variable = self.origins.get(path)
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


def parse_config(
    text: str, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> BridgeConfig:
    """Build a :class:`BridgeConfig` from YAML text and ``SKB_*`` variables (none by default)."""
    data, lines = read_yaml(text, source)
    return config_from_dict(data, source, environ, lines)


def config_from_dict(
    data: Any,
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
    lines: LineIndex | None = None,
) -> BridgeConfig:
    """Build a :class:`BridgeConfig` from already parsed data (the shape of the YAML file)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the file must hold a mapping, got {type(data).__name__}")
    data, origins = _env_overrides(environ or {}, dict(data))
    try:
        file = ConfigFile.model_validate(data)
    except ValidationError as e:
        first = min(e.errors(), key=lambda error: _reading_order(error, data))
        raise _Locator(source, lines or {}, origins).error(*_problem(first)) from None
    return BridgeConfig(
        pools=file.pool_set,
        cluster_name=file.cluster_name,
        kubernetes=KubernetesSettings(**dict(file.kubernetes)),
        slurm=SlurmSettings(**dict(file.slurm)),
        bridge=BridgeSettings(
            **{
                **dict(file.bridge),
                "circuit_breaker": file.bridge.circuit_breaker.policy
                if file.bridge.circuit_breaker
                else None,
            }
        ),
        source=source,
    )


def load_config(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> BridgeConfig:
    """Read the configuration file at ``path``; ``environ`` defaults to the process environment."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as stream:
            text = stream.read(MAX_FILE_SIZE + 1)  # enough for read_yaml to say it is too big
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
    summary = [
        f"{config.source}: OK",
        f"cluster {config.cluster_name}, namespace {config.kubernetes.namespace}, "
        f"conf server {config.slurm.conf_server}",
    ]
    for pool in config.pools:
        image = pool.image or template_image(pool.pod_template)
        summary.append(
            f"pool {pool.name}: {pool.nodes} ({len(pool.node_names)} nodes), "
            f"partition {pool.partition}, {pool.cpus} CPUs, {pool.real_memory_mb} MB, image {image}"
        )
    return "\n".join(summary)


def config_to_yaml(config: BridgeConfig) -> str:
    """The configuration as YAML text that loads back to an equal configuration."""
    text: str = yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False)
    return text
