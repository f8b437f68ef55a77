"""The layering contract, read from the source with ``ast`` (imports anywhere, lazy ones too).

- ``bridge/domain`` is pure: no network, process or Kubernetes/gRPC libraries, no adapters and
  nothing above it (api, app, client, service, config, hooks).
- Across the package only ``bridge/adapters/kubernetes/`` imports ``kubernetes`` (its call and
  gateway modules; the watch only uses the client it is handed), and only
  ``bridge/adapters/slurm_cli.py`` and ``bridge/hooks.py`` (which set nodes DOWN when the bridge
  is unreachable) import ``subprocess``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bridge"

DOMAIN_FORBIDDEN = (
    "grpc",
    "grpc_health",
    "google.protobuf",
    "kubernetes",
    "tenacity",
    "subprocess",
    "socket",
    "urllib3",
    "requests",
    "importlib",  # a dynamic import would walk around this test
    "bridge.adapters",
    "bridge.api",
    "bridge.app",
    "bridge.client",
    "bridge.service",
    "bridge.config",
    "bridge.hooks",
    "bridge._proto",
)

#: module → the only files (relative to the repository) allowed to import it.
ONLY_IMPORTED_BY = {
    "kubernetes": {"bridge/adapters/kubernetes/calls.py", "bridge/adapters/kubernetes/gateway.py"},
    "subprocess": {"bridge/adapters/slurm_cli.py", "bridge/hooks.py"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> Iterator[str]:
    """Every module ``source`` imports (absolute names; relative imports resolved)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target
            # `from bridge import adapters` imports bridge.adapters.
            yield from (f"{target}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            yield "importlib"


def matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Forbidden imports of a domain module."""
    found: set[str] = set()
    for name in imported_modules(source, module, is_package):
        found.update(f for f in DOMAIN_FORBIDDEN if matches(name, f))
    return sorted(found)


def sources(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if "__pycache__" not in p.parts)


def domain_files() -> list[Path]:
    return sources(PACKAGE / "domain")


def test_the_domain_has_modules() -> None:
    names = {p.name for p in domain_files()}
    assert {"reconcile.py", "nodes.py", "pods.py", "pools.py", "hostlist.py"} <= names


@pytest.mark.parametrize("path", domain_files(), ids=lambda p: p.name)
def test_domain_module_imports_nothing_impure(path: Path) -> None:
    assert violations(path.read_text(), module_name(path), path.name == "__init__.py") == []


def test_only_the_named_files_import_kubernetes_and_subprocess() -> None:
    importers: dict[str, set[str]] = {name: set() for name in ONLY_IMPORTED_BY}
    for path in sources(PACKAGE):
        rel = path.relative_to(ROOT).as_posix()
        for name in imported_modules(path.read_text(), module_name(path)):
            for wanted in ONLY_IMPORTED_BY:
                if matches(name, wanted):
                    importers[wanted].add(rel)
    for wanted, allowed in ONLY_IMPORTED_BY.items():
        assert importers[wanted] <= allowed, f"{wanted} imported by {importers[wanted] - allowed}"
    # The contract names real files: a rename must update it.
    assert importers["kubernetes"] == ONLY_IMPORTED_BY["kubernetes"]
    assert "bridge/adapters/slurm_cli.py" in importers["subprocess"]


# The checker itself, on synthetic sources: each must be caught (or let through) as stated.
@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("import kubernetes", "bridge.domain.x", ["kubernetes"]),
        ("from kubernetes.client import CoreV1Api", "bridge.domain.x", ["kubernetes"]),
        ("import grpc", "bridge.domain.x", ["grpc"]),
        ("import grpc_health.v1.health", "bridge.domain.x", ["grpc_health"]),
        ("from tenacity import retry", "bridge.domain.x", ["tenacity"]),
        ("import urllib3, requests", "bridge.domain.x", ["requests", "urllib3"]),
        ("def f():\n    import subprocess\n", "bridge.domain.x", ["subprocess"]),
        ("if True:\n    from socket import socket\n", "bridge.domain.x", ["socket"]),
        ("from bridge.adapters.slurm_cli import SlurmCli", "bridge.domain.x", ["bridge.adapters"]),
        ("from bridge import adapters", "bridge.domain.x", ["bridge.adapters"]),
        ("from bridge import api", "bridge.domain.x", ["bridge.api"]),
        ("import bridge.app", "bridge.domain.x", ["bridge.app"]),
        ("from bridge.client import BridgeClient", "bridge.domain.x", ["bridge.client"]),
        ("from ..adapters import kubernetes", "bridge.domain.x", ["bridge.adapters"]),
        ("from .. import service", "bridge.domain.x", ["bridge.service"]),
        ("from ...adapters import x", "bridge.domain.sub.y", ["bridge.adapters"]),
        ("m = __import__('kubernetes')", "bridge.domain.x", ["importlib"]),
        ("import importlib", "bridge.domain.x", ["importlib"]),
        # Allowed: the standard library's pure parts, the domain itself, the error tree.
        ("import re, copy\nfrom dataclasses import dataclass", "bridge.domain.x", []),
        ("from .nodes import SlurmNode\nfrom . import pods", "bridge.domain.x", []),
        ("from bridge.errors import BridgeError", "bridge.domain.x", []),
        ("from bridge.domain.hostlist import expand", "bridge.domain.x", []),
        ("import grpcio_like_name", "bridge.domain.x", []),
        ("import kubernetes_asyncio_not_really", "bridge.domain.x", []),
    ],
)
def test_checker_catches_what_it_should(source: str, module: str, expected: list[str]) -> None:
    assert violations(source, module) == expected


def test_relative_imports_in_a_package_init_resolve_against_the_package() -> None:
    assert violations("from .adapters import x", "bridge", is_package=True) == ["bridge.adapters"]
    assert violations("from .pods import PodView", "bridge.domain", is_package=True) == []
