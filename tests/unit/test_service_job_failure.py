"""Job-aware failure in BridgeService: a fail-fast DOWN (refused create, or the reconcile plan's
MarkDown) also writes the reason into the jobs' AdminComment and releases their other nodes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from bridge.domain.job_failure import SlurmJob
from bridge.domain.pods import PodFailure
from bridge.domain.reason import Reason
from bridge.domain.reconcile import MarkDown
from bridge.errors import BackendError, Forbidden, TransientBackendError
from tests.unit.fakes import Update
from tests.unit.test_service import NOW, World, cloud, powering_up

FULL = "k8s: Forbidden: denied by policy"


def parsed(text: str) -> Reason:
    reason = Reason.parse(text)
    assert reason is not None, text
    return reason


STARTING = frozenset({"RUNNING", "CONFIGURING", "POWER_UP_NODE"})


def two_node_job(comment: str = "") -> World:
    """cpu-0 and cpu-1 powering up for job 7; cpu-1's create is refused for good."""
    w = World(*powering_up("cpu-0", "cpu-1"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-1]", comment)
    w.pods.create_errors["cpu-1"] = Forbidden("denied by policy")
    return w


def test_a_refused_create_comments_the_job_then_downs_then_releases_its_other_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = two_node_job()
    w.service.resume("cpu-[0-1]", "", "r1")
    assert [line for line in w.journal if line.startswith("slurm")] == [
        f"slurm admincomment 7 {FULL!r}",
        "slurm down cpu-1",
        "slurm power_down_force cpu-0",
    ]
    assert w.slurm.jobs[7].admin_comment == FULL
    assert w.slurm.updates == [
        Update(("cpu-1",), "down", FULL),
        Update(("cpu-0",), "power_down_force"),
    ]
    assert w.slurm.nodes["cpu-0"].is_powered_down
    assert f"job 7: node(s) cpu-1 failed ({FULL}); released cpu-0; AdminComment set" in caplog.text


def test_the_reconcile_plans_fail_fast_is_job_aware_too() -> None:
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-1]")
    w.slurm.jobs[8] = SlurmJob(8, frozenset({"RUNNING"}), "cpu-2")
    old = NOW - timedelta(minutes=5)
    w.pods.add("cpu-0", phase="Pending", created_at=old)
    w.pods.add(
        "cpu-1", phase="Pending", failure=PodFailure("ErrImagePull", "denied"), created_at=old
    )
    w.pods.add("cpu-2", phase="Pending", created_at=old)
    assert MarkDown("cpu-1", Reason("ErrImagePull", "denied")) in w.service.reconcile_once()
    assert w.slurm.updates == [
        Update(("cpu-1",), "down", "k8s: ErrImagePull: denied"),
        Update(("cpu-0",), "power_down_force"),
    ]
    assert w.slurm.jobs[7].admin_comment == "k8s: ErrImagePull: denied"
    assert w.slurm.jobs[8].admin_comment == ""
    # One read covers the failed node and every node a job could release; after the DOWN the
    # node to release is read once more (another job may have taken it meanwhile).
    assert w.slurm.jobs_reads == [("cpu-1", "cpu-0", "cpu-2"), ("cpu-0",)]


@pytest.mark.parametrize(
    ("taken_by", "released"),
    [
        (None, True),
        (SlurmJob(9, STARTING, "cpu-0"), False),
        (SlurmJob(9, frozenset({"PENDING"})), True),
    ],
    ids=["nobody", "another-job", "a-pending-job"],
)
def test_a_node_another_job_took_after_the_down_is_not_released(
    taken_by: SlurmJob | None, released: bool
) -> None:
    """Issue 29 item 7: the DOWN requeues job 7, and Slurm gives cpu-0 (still powering up) to
    job 9 before the release; power_down_force on it would requeue job 9 as well."""
    w = two_node_job()
    down = w.slurm.update_nodes

    def update_nodes(names: Sequence[str], *, state: str, reason: str | None = None) -> None:
        down(names, state=state, reason=reason)
        if state == "down" and taken_by is not None:
            w.slurm.jobs[7] = SlurmJob(7, frozenset({"PENDING"}))  # requeued
            w.slurm.jobs[taken_by.job_id] = taken_by

    w.slurm.update_nodes = update_nodes  # type: ignore[method-assign]
    w.service.resume("cpu-[0-1]", "", "r1")
    assert (Update(("cpu-0",), "power_down_force") in w.slurm.updates) is released


def test_an_admins_admin_comment_is_kept_and_the_node_still_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = two_node_job(comment="ticket 42")
    w.service.resume("cpu-[0-1]", "", "r1")
    assert w.slurm.jobs[7].admin_comment == "ticket 42"
    assert not any("admincomment" in line for line in w.journal)
    assert Update(("cpu-0",), "power_down_force") in w.slurm.updates
    assert "released cpu-0; AdminComment not set" in caplog.text


def test_a_node_another_job_holds_is_not_released() -> None:
    w = two_node_job()
    w.slurm.jobs[8] = SlurmJob(8, STARTING, "cpu-0")
    w.service.resume("cpu-[0-1]", "", "r1")
    assert w.slurm.updates == [Update(("cpu-1",), "down", FULL)]


def test_unreadable_jobs_never_stop_the_down(caplog: pytest.LogCaptureFixture) -> None:
    w = two_node_job()
    w.slurm.jobs_error = TransientBackendError("slurmctld unreachable")
    w.service.resume("cpu-[0-1]", "", "r1")
    assert w.slurm.updates == [Update(("cpu-1",), "down", FULL)]
    assert w.slurm.jobs[7].admin_comment == ""
    assert "jobs on cpu-1 not read" in caplog.text


def test_a_refused_admin_comment_never_stops_the_down_or_the_release(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = two_node_job()
    w.slurm.comment_error = BackendError("scontrol: Invalid job id specified")
    w.service.resume("cpu-[0-1]", "", "r1")
    assert w.slurm.updates == [
        Update(("cpu-1",), "down", FULL),
        Update(("cpu-0",), "power_down_force"),
    ]
    assert "job 7: AdminComment not set: scontrol: Invalid job id specified" in caplog.text
    assert "released cpu-0; AdminComment not set" in caplog.text


def test_nothing_is_released_when_slurm_refused_the_down() -> None:
    # Without the DOWN the job is not requeued: a forced power down would kill it instead.
    w = two_node_job()
    w.slurm.fail_next = TransientBackendError("slurmctld busy")
    w.service.resume("cpu-[0-1]", "", "r1")
    assert w.slurm.updates == [Update(("cpu-1",), "down", FULL)]


def test_a_refused_release_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    w = two_node_job()
    w.slurm.state_errors["power_down_force"] = BackendError("Invalid node state transition")
    w.service.resume("cpu-[0-1]", "", "r1")
    assert [u.state for u in w.slurm.updates] == ["down", "power_down_force"]
    assert "not released cpu-0" in caplog.text
    assert f"job 7: node(s) cpu-1 failed ({FULL}); released -; AdminComment set" in caplog.text


@pytest.mark.parametrize(
    "reason",
    ["k8s: PodMissing: no pod for node cpu-1", "k8s: Evicted: node drained"],
)
def test_downs_that_are_no_fail_fast_read_no_jobs(reason: str) -> None:
    w = World(*powering_up("cpu-0"), cloud("cpu-1", "ALLOCATED"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-1]")
    down = parsed(reason)
    if down.kind == "Evicted":  # the evidence the DOWN is checked against, read live
        w.pods.add("cpu-1", failure=PodFailure(down.kind, down.message))
    w.service.execute([MarkDown("cpu-1", down)])
    assert w.slurm.jobs_reads == []
    assert w.slurm.updates == [Update(("cpu-1",), "down", reason)]
    assert w.slurm.jobs[7].admin_comment == ""


def test_a_node_failing_for_another_reason_in_the_same_pass_is_not_released() -> None:
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-2]")
    image, name = PodFailure("ErrImagePull", "denied"), PodFailure("InvalidImageName", "bad")
    w.pods.add("cpu-1", phase="Pending", failure=image)
    w.pods.add("cpu-2", phase="Pending", failure=name)
    w.service.execute(
        [
            MarkDown("cpu-1", Reason(image.reason, image.message)),
            MarkDown("cpu-2", Reason(name.reason, name.message)),
        ]
    )
    assert w.slurm.updates == [
        Update(("cpu-1",), "down", "k8s: ErrImagePull: denied"),
        Update(("cpu-0",), "power_down_force"),
        Update(("cpu-2",), "down", "k8s: InvalidImageName: bad"),
    ]


def test_a_job_hostlist_that_cannot_be_expanded_never_stops_the_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = two_node_job()
    w.slurm.jobs[8] = SlurmJob(8, STARTING, "cpu-[5-1]")
    w.service.resume("cpu-[0-1]", "", "r1")
    assert w.slurm.updates == [Update(("cpu-1",), "down", FULL)]
    assert "jobs on cpu-1 not read" in caplog.text


def test_a_failure_on_an_admins_drain_keeps_their_reason_and_comments_the_job_with_ours() -> None:
    """Issue 29 item 10: the DOWN writes the admin's reason back (Slurm keeps the DRAIN flag),
    the job learns Kubernetes' reason from its AdminComment."""
    admin = "maintenance: disk check"
    w = World(cloud("cpu-0", "ALLOCATED", "DRAIN", reason=admin))
    w.slurm.jobs[7] = SlurmJob(7, frozenset({"RUNNING"}), "cpu-0")
    w.pods.add("cpu-0", phase="Failed", failure=PodFailure("OOMKilled", "slurmd"))
    actions = w.service.reconcile_once()
    assert MarkDown("cpu-0", Reason("OOMKilled", "slurmd"), admin_reason=admin) in actions
    assert w.slurm.updates == [Update(("cpu-0",), "down", admin)]
    assert w.slurm.jobs[7].admin_comment == "k8s: OOMKilled: slurmd"
    assert w.slurm.nodes["cpu-0"].reason == admin
    assert w.slurm.nodes["cpu-0"].is_drained


def test_a_pass_failing_nodes_for_two_reasons_reads_their_jobs_once() -> None:
    """Issue 29 item 12: one squeue a pass, not one a distinct reason."""
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-2]")
    old = NOW - timedelta(minutes=5)
    w.pods.add("cpu-0", phase="Pending", created_at=old)
    image, name = PodFailure("ErrImagePull", "denied"), PodFailure("InvalidImageName", "bad")
    w.pods.add("cpu-1", phase="Pending", failure=image, created_at=old)
    w.pods.add("cpu-2", phase="Pending", failure=name, created_at=old)
    w.service.reconcile_once()
    assert [u.state for u in w.slurm.updates].count("down") == 2
    # The pass's one read covers both failed nodes and the one a job could release (before,
    # one such read a reason); a release reads its node once more after the DOWN.
    assert w.slurm.jobs_reads[0] == ("cpu-1", "cpu-2", "cpu-0")
    assert all(read == ("cpu-0",) for read in w.slurm.jobs_reads[1:]), w.slurm.jobs_reads
