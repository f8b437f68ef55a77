"""The committed generated code must be exactly what the generator makes from the .proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "bridge" / "rpc" / "_proto"


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("proto")
    subprocess.run(
        [sys.executable, str(REPO / "dev" / "generate_proto.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return _files(out)


def test_same_file_set(regenerated: dict[str, bytes]) -> None:
    assert sorted(_files(COMMITTED)) == sorted(regenerated), (
        "bridge/rpc/_proto is stale: run `python dev/generate_proto.py`"
    )


@pytest.mark.parametrize(
    "name",
    [
        "__init__.py",
        "slurm_k8s_bridge/__init__.py",
        "slurm_k8s_bridge/v1/__init__.py",
        "slurm_k8s_bridge/v1/bridge_pb2.py",
        "slurm_k8s_bridge/v1/bridge_pb2.pyi",
        "slurm_k8s_bridge/v1/bridge_pb2_grpc.py",
    ],
)
def test_committed_file_is_current(regenerated: dict[str, bytes], name: str) -> None:
    committed = COMMITTED / name
    assert committed.read_bytes() == regenerated[name], (
        f"bridge/rpc/_proto/{name} differs from what proto/ generates: "
        "run `python dev/generate_proto.py` and commit the result"
    )


def test_imports_as_package_with_proto_name_unchanged() -> None:
    from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2, bridge_pb2_grpc  # noqa: PLC0415

    assert bridge_pb2.DESCRIPTOR.name == "slurm_k8s_bridge/v1/bridge.proto"
    assert bridge_pb2.DESCRIPTOR.package == "slurm_k8s_bridge.v1"
    assert hasattr(bridge_pb2_grpc, "BridgeStub")
