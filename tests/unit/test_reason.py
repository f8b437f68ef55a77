"""bridge.domain.reason: a reason of ours as Slurm's text and back, the fail-fast rule, the
metric label."""

from __future__ import annotations

import pytest

from bridge.domain.reason import MAX_TEXT, Reason, slurm_said_last


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        (
            "k8s: ImagePullBackOff: back-off pulling image x",
            Reason("ImagePullBackOff", "back-off pulling image x"),
        ),
        (
            'k8s: Forbidden: pods "cpu-0" is forbidden: a: b',
            Reason("Forbidden", 'pods "cpu-0" is forbidden: a: b'),
        ),
        ("k8s: Forbidden", Reason("Forbidden", "")),
        ("k8s: ", Reason("", "")),
        # Slurm 23.02+ appended its own DOWN to a reason of ours: the state is Slurm's now.
        ("k8s: Rollout: pool cpu template a -> b : Not responding", None),
        ("k8s: Cordoned: kubernetes node kn-1 is cordoned : ResumeTimeout reached", None),
        ("Not responding", None),
        ("admin: disk replaced", None),
        ("", None),
    ],
)
def test_parse(text: str, parsed: Reason | None) -> None:
    assert Reason.parse(text) == parsed


@pytest.mark.parametrize(
    "reason",
    [
        Reason("ErrImagePull", "denied"),
        Reason("Unschedulable", "0/3 nodes are available: 3 Insufficient cpu."),
        Reason("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached"),
    ],
)
def test_text_parses_back_to_the_same_reason(reason: Reason) -> None:
    assert Reason.parse(reason.text) == reason
    assert str(reason) == reason.text


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        (Reason("ErrImagePull", "denied"), "k8s: ErrImagePull: denied"),
        (Reason("Evicted", "line one\nline two\n"), "k8s: Evicted: line one line two"),
        (Reason("Unschedulable", "x" * 300), "k8s: Unschedulable: " + "x" * 177 + "..."),
        (Reason("Failed", "exit 1 : see log"), "k8s: Failed: exit 1 - see log"),
    ],
    ids=["plain", "newlines", "truncated", "never-slurm's-separator"],
)
def test_text_is_one_short_line(reason: Reason, text: str) -> None:
    assert reason.text == text
    assert len(reason.text) <= MAX_TEXT


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("k8s: ImagePullBackOff: nope", True),
        ("k8s: Forbidden: admission webhook denied", True),
        ("k8s: PoolPaused: pool gpu paused until ...", False),
        ("k8s: PodMissing: no pod for node gpu-0", False),
        ("k8s: EvictionByEvictionAPI: Eviction API: evicting", False),
        ("k8s: Deleted: the pod is being deleted", False),
        ("k8s: PreemptionByScheduler: preempted", False),
        ("k8s: CrashLoopBackOff: back-off restarting", True),
        ("k8s: NotTriggerScaleUp: no node group fits", True),
        ("admin: disk replaced", False),
        ("", False),
    ],
)
def test_what_counts_as_a_fail_fast(text: str, counts: bool) -> None:
    reason = Reason.parse(text)
    assert (reason is not None and reason.is_fail_fast) is counts


@pytest.mark.parametrize(
    ("kind", "label"),
    [
        ("ImagePullBackOff", "ImagePullBackOff"),
        ("pod cpu-3 was evicted by node x", "other"),
        ("", "other"),
    ],
)
def test_the_metric_label_is_a_word_or_other(kind: str, label: str) -> None:
    assert Reason(kind, "").label == label


@pytest.mark.parametrize(
    ("text", "last"),
    [
        ("k8s: Rollout: x : ResumeTimeout reached", "ResumeTimeout reached"),
        ("k8s: Rollout: x : Not responding : ResumeTimeout reached", "ResumeTimeout reached"),
        ("ResumeTimeout reached", "ResumeTimeout reached"),
        ("", ""),
    ],
)
def test_what_slurm_said_last(text: str, last: str) -> None:
    assert slurm_said_last(text) == last
