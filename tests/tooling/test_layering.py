"""What the import contracts cannot say: the domain does no I/O through calls that need no import.

Who may import what (the layers, a domain free of grpc/kubernetes/subprocess/yaml/os, the one
module that imports ``kubernetes``) is ``lint-imports``'s job, from pyproject's
``[tool.importlinter]`` contracts, run by ``make lint``. Those contracts see imports only; a
builtin needs none. So here, read from the source with ``ast``: ``bridge/domain`` does not call
``open``/``print``/``input``, run code (``exec``, ``eval``, ``__import__``), touch files through a
path object it was handed, or read the clock (decisions take ``now`` as an argument).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bridge"

#: Builtins that read, write or run something; referring to one at all counts (``f = open``).
IO_BUILTINS = frozenset(
    {"open", "print", "input", "exec", "eval", "compile", "__import__", "breakpoint"}
)
#: Methods that do file I/O or read the clock, whatever object they are called on.
IO_METHODS = frozenset(
    {"open", "read_text", "write_text", "read_bytes", "write_bytes", "now", "utcnow", "today"}
)

#: The contracts that took over the import checks this file used to make.
CONTRACTS = {"layers", "pure-domain", "kubernetes-adapter", "subprocess-callers"}


def io_uses(source: str) -> list[str]:
    """The I/O builtins ``source`` refers to and the I/O methods it calls (``.name``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in IO_BUILTINS:
                found.add(node.id)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in IO_METHODS
        ):
            found.add("." + node.func.attr)
    return sorted(found)


def domain_files() -> list[Path]:
    return sorted(p for p in (PACKAGE / "domain").rglob("*.py") if "__pycache__" not in p.parts)


def test_the_domain_has_modules() -> None:
    names = {p.name for p in domain_files()}
    assert {"reconcile.py", "nodes.py", "pods.py", "pools.py", "hostlist.py"} <= names


@pytest.mark.parametrize("path", domain_files(), ids=lambda p: p.name)
def test_domain_module_does_no_io(path: Path) -> None:
    assert io_uses(path.read_text()) == []


def test_the_import_contracts_are_declared_and_run_by_make_lint() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert config["root_packages"] == ["bridge"]
    assert {c["id"] for c in config["contracts"]} >= CONTRACTS
    pure = next(c for c in config["contracts"] if c["id"] == "pure-domain")
    assert pure["source_modules"] == ["bridge.domain"]
    assert {"grpc", "kubernetes", "subprocess", "yaml", "socket"} <= set(pure["forbidden_modules"])
    lint = (ROOT / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "$(VENV)/bin/lint-imports" in lint


# The checker itself, on synthetic sources: each must be caught (or let through) as stated.
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("data = open('x').read()", ["open"]),
        ("with open(p) as f:\n    pass", ["open"]),
        ("reader = open", ["open"]),
        ("def f():\n    print('x')\n", ["print"]),
        ("answer = input()", ["input"]),
        ("exec('import os')", ["exec"]),
        ("value = eval('1 + 1')", ["eval"]),
        ("code = compile('x', 'f', 'eval')", ["compile"]),
        ("m = __import__('kubernetes')", ["__import__"]),
        ("class A:\n    def f(self) -> None:\n        breakpoint()\n", ["breakpoint"]),
        ("def f(p):\n    return p.read_text()\n", [".read_text"]),
        ("p.write_text('x')", [".write_text"]),
        ("p.read_bytes()", [".read_bytes"]),
        ("p.write_bytes(b'')", [".write_bytes"]),
        ("with p.open() as f:\n    pass", [".open"]),
        ("stamp = datetime.now(UTC)", [".now"]),
        ("stamp = datetime.utcnow()", [".utcnow"]),
        ("day = date.today()", [".today"]),
        ("print(open('x').read())", ["open", "print"]),
        # Allowed: pure calls that share a name, names that merely contain one, `now` as data.
        ("pattern = re.compile('x')", []),
        ("moment = datetime.fromisoformat(s.replace('Z', '+00:00'))", []),
        ("opened = 1\nopen_nodes = [opened]", []),
        ("def f(now, since):\n    return now - since\n", []),
        ("now = live.get(key)", []),
        ("self.open = True", []),
        ("def open_pod(name):\n    return name\n", []),
    ],
)
def test_checker_catches_what_it_should(source: str, expected: list[str]) -> None:
    assert io_uses(source) == expected
