"""A short `make bench` scale run: 200 kwok-backed nodes resumed and suspended through the real
hooks and a second bridge, beside the lean client, on every test run.

The full run (1k / 5k / 10k nodes against three baselines, ~20 minutes) is `make bench`; this
smoke proves the harness (watcher, second bridge, baselines, cleanup) and the resume contract at
a size where creating the pods outlasts the hook's answer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import ProvingGround

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dev" / "bench"))

import resume_scale  # noqa: E402 (dev/bench/ is not a package)

NODES = 200


def test_200_nodes_resumed_through_the_hook_all_pods_exist_then_go(
    proving_ground: ProvingGround,
) -> None:
    with resume_scale.Ground.open() as ground:
        lean = ground.measure("lean", NODES)
        bridge = ground.measure("bridge", NODES)
        samples = ground.hook_samples(NODES, 2)  # the Go client, as hook.sh picks it
        hook_log = (ground.bridge.work / "hooks.log").read_text()
        left = resume_scale.pods_exist(ground.admin, resume_scale.SELECTORS["bridge"])
    results = resume_scale.Results((lean, bridge), (("go", NODES, tuple(samples)),))
    for line in resume_scale.table_lines(results):
        print("  ".join(line))
    resumes = [line for line in hook_log.splitlines() if " resume " in line]
    assert len(resumes) == 3, hook_log
    # The contract: the hook's answer names every node ACCEPTED (it does not wait for pods).
    for line in resumes:
        assert f"result=ok nodes={NODES} ok=0 accepted={NODES} not_ok=0" in line, line
    suspends = [line for line in hook_log.splitlines() if " suspend " in line]
    assert len(suspends) == 1 and "not_ok=0" in suspends[0], hook_log
    assert bridge.delete_s is not None and lean.delete_s is not None
    assert left == [], f"cleanup left {len(left)} pods"
