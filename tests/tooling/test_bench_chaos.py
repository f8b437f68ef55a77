"""dev/bench/chaos.py's namespace allow-lists come from the ground's namespace manifest (the run
itself needs the proving ground)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "dev" / "bench"))

import chaos

NAMESPACE_DIR = ROOT / "deploy" / "kustomize" / "namespace"


def _annotation_lines(text: str) -> dict[str, str]:
    # Read without YAML on purpose: the manifest's allow-list lines as a person reads them.
    return dict(re.findall(r"(?m)^\s+(slurm-k8s-bridge\.io/allowed-[a-z-]+): (.+)$", text))


def test_every_allow_list_of_the_manifest_is_carried() -> None:
    in_manifest = _annotation_lines(chaos.NAMESPACE_MANIFEST.read_text())
    assert set(chaos.ALLOW_LISTS) <= set(in_manifest)
    assert chaos.allow_list_annotations() == in_manifest


def test_the_allow_lists_are_what_the_admission_guard_reads() -> None:
    policy = (NAMESPACE_DIR / "admission-policy.yaml").read_text()
    read = set(
        re.findall(r"variables\.annotations\['(slurm-k8s-bridge\.io/allowed-[a-z-]+)'\]", policy)
    )
    assert set(chaos.ALLOW_LISTS) <= read


@pytest.mark.parametrize("dropped", chaos.ALLOW_LISTS)
def test_a_missing_allow_list_is_an_error(dropped: str, tmp_path: Path) -> None:
    manifest = tmp_path / "namespace.yaml"
    manifest.write_text(
        "".join(
            line
            for line in chaos.NAMESPACE_MANIFEST.read_text().splitlines(keepends=True)
            if not line.lstrip().startswith(f"{dropped}:")
        )
    )
    with pytest.raises(
        RuntimeError, match=rf"{re.escape(str(manifest))}: .* no {re.escape(dropped)}:"
    ):
        chaos.allow_list_annotations(manifest)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: slurm\n",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: slurm\n  annotations: {}\n",
        "- not a manifest\n",
    ],
    ids=["empty file", "no annotations", "empty annotations", "a list"],
)
def test_a_manifest_without_allow_lists_is_an_error(text: str, tmp_path: Path) -> None:
    manifest = tmp_path / "namespace.yaml"
    manifest.write_text(text)
    with pytest.raises(RuntimeError, match=re.escape(", ".join(chaos.ALLOW_LISTS))):
        chaos.allow_list_annotations(manifest)
