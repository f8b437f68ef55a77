"""The reconcile plan: from Slurm's view and Kubernetes' view to the actions that make them agree.

A purely computational function: ``plan(slurm_nodes, pods, pools, now, guards)`` returns actions;
executing them is the service's job. Slurm is the authority on which nodes should run; the pods
are the actuator. Every decision carries a ``why`` that is logged verbatim.

The cases (node = Slurm's view, pod = ours):

=========================================  ======================================================
node powered down or powering down, pod    delete the pod once older than the age guard
node powering up, no pod                   create it (a Resume we missed, e.g. bridge was down)
node powering up, pod terminating          the previous cycle's pod: wait for it to go, then
                                           create; never inherit its failure
node powering up or up, pod failed or      DOWN with ``k8s: <Reason>: <message>``, delete pod
Kubernetes said no (``verdict.judge_pod``) (fail fast: Slurm requeues the job at once)
node powering up, pod held up (waiting)    the node's Comment says why: ``k8s: waiting: ...``
node powering up, its pod's PodGroup (the  DOWN with ``k8s: Unschedulable: pod group ...``
job's gang) cannot be placed whole         at once, unless an autoscaler adds capacity
                                           (``verdict.judge_pod``); not before the pod view
                                           holds the whole gang (``gangs.groups_in_view``)
node up, no pod                            DOWN with ``k8s: PodMissing`` (re-checked at once
                                           before it is applied), power down after the hold
node DOWN (our reason), not powered down   delete the pod if any (not while a job on it is still
                                           completing), power down after the hold
node powered down + DOWN with our reason   resume it to ``idle~`` after the hold time
pod whose node no pool owns or Slurm lacks delete it once older than the age guard
any pod still terminating past its grace   force-delete it (its kubelet is gone: nobody else
period plus ``terminating_margin``         will ever confirm the delete)
pod with an IP, node wants it              Slurm's NodeAddr follows the pod IP (slurmctld
                                           forgets learnt addresses when it restarts)
node powered down, no pod                  NodeAddr back to the node's name (the old IP may be
                                           reused by another pod)
node wants its pod, pod runs on a node     the Comment names pod, Kubernetes node and IP (not
with an IP                                 over an admin's comment); a waiting message wins
PodGroup of ours no pod names, older than  delete it (``gangs.stale_pod_groups``): groups have
``pod_group_age_guard``                    no owner, so nothing else would
pod that stays, its label or condition     ``SetPodSlurmState``: the state label and the
differs from the node's Slurm state        ``registered`` condition follow Slurm
node wants its pod, pod runs on a cordoned ``PowerDownAsap`` with ``k8s: Cordoned``: Slurm
Kubernetes node                            drains it, powers it down when its jobs end, and the
                                           next resume's pod lands elsewhere (not over an
                                           admin's drain, not twice)
node wants its pod, pod on an older        ``PowerDownAsap`` with ``k8s: Rollout: ...``: idle
template (hash known and not the pool's)   nodes power down at once, busy ones after their jobs;
                                           the next resume renders the new template. Not while
                                           powering up (a job waits for that node: it rolls
                                           after the job) nor over an admin's reason
=========================================  ======================================================

The last two act only on a difference, so a quiet cluster costs no write: at most one label
patch and one status patch per pod per Slurm transition.

Deletes carry the pod's UID, so a decision about one pod never removes its successor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .gangs import STALE_POD_GROUP_AGE, groups_in_view, stale_pod_groups
from .nodes import SlurmNode
from .pod_groups import PodGroupView
from .pod_slurm_state import is_registered, pod_comment, slurm_state_word
from .pods import TERMINATING, PodView
from .pools import NodePool, PoolSet
from .reason import REASON_PREFIX, Reason, our_reason
from .verdict import Fail, ScaleUpEvent, Wait, judge_pod


@dataclass(frozen=True)
class Guards:
    """Time guards that keep the reconciler from racing the direct RPC paths."""

    pod_age_guard: timedelta = timedelta(seconds=30)
    failed_node_hold: timedelta = timedelta(seconds=30)
    #: How long past its grace period a terminating pod may take before it is force-deleted.
    terminating_margin: timedelta = timedelta(seconds=15)
    #: How old a PodGroup no pod names must be before it is deleted (its resume creates the
    #: pods right after it).
    pod_group_age_guard: timedelta = STALE_POD_GROUP_AGE


@dataclass(frozen=True)
class CreatePod:
    node: str
    pool: str
    why: str


@dataclass(frozen=True)
class DeletePod:
    node: str
    why: str
    #: The pod's UID (a delete precondition); empty when unknown.
    uid: str = ""


@dataclass(frozen=True)
class DeletePodGroup:
    """Delete a PodGroup of ours that no pod names any more (a gang that ended)."""

    name: str
    why: str


@dataclass(frozen=True)
class ForceDeletePod:
    """Delete with grace period 0: the pod is stuck terminating (its kubelet is gone)."""

    node: str
    uid: str
    why: str


@dataclass(frozen=True)
class MarkDown:
    """Set the node DOWN with a reason of ours (Slurm requeues its jobs)."""

    node: str
    reason: Reason
    #: Apply only if the node still has no pod when re-checked (a pod the snapshot missed
    #: must never cost a running job).
    unless_pod_exists: bool = False
    #: The reason of an admin's DRAIN or FAIL on the node: Slurm is given it again instead of
    #: ours, so the node stays theirs (DOWN keeps the DRAIN flag; the bridge never powers down
    #: or resumes a node whose reason is not its own). Ours goes to the log, the pod's Event
    #: and the jobs' AdminComment.
    admin_reason: str = ""


@dataclass(frozen=True)
class SetAddress:
    """Point Slurm's NodeAddr for the node at ``address`` (the pod IP, or back to the name)."""

    node: str
    address: str
    why: str


@dataclass(frozen=True)
class SetComment:
    """Set the node's Comment to ``text`` (ours: ``k8s: waiting: ...`` or ``k8s: pod ...``), or
    clear it (``""``)."""

    node: str
    text: str


@dataclass(frozen=True)
class SetPodSlurmState:
    """Show the node's Slurm state on its pod: the state label and the ``registered`` condition.

    ``was_state`` and ``was_registered`` are what the pod showed (``""``/None: nothing yet), so
    the executor patches only what changed: the label, the condition (status subresource), or
    both.
    """

    node: str
    state: str
    registered: bool
    was_state: str = ""
    was_registered: bool | None = None
    #: The pod's UID: which pod the patch was meant for (the service remembers it was sent).
    uid: str = ""

    @property
    def label_changes(self) -> bool:
        return self.state != self.was_state

    @property
    def condition_changes(self) -> bool:
        return self.registered != self.was_registered


@dataclass(frozen=True)
class PowerDown:
    """Force a power down so the node returns to ``idle~`` instead of waiting for a timeout."""

    node: str
    why: str


@dataclass(frozen=True)
class PowerDownAsap:
    """Drain the node with our reason and power it down once its jobs end (Slurm's
    POWER_DOWN_ASAP); Slurm clears that drain itself when it powers the node down, so the next
    resume creates a new pod."""

    node: str
    reason: str


@dataclass(frozen=True)
class ResumeNode:
    """Clear our DOWN on a powered-down node: it becomes ``idle~`` and schedulable again."""

    node: str
    why: str


Action = (
    CreatePod
    | DeletePod
    | DeletePodGroup
    | ForceDeletePod
    | MarkDown
    | PowerDown
    | PowerDownAsap
    | ResumeNode
    | SetAddress
    | SetComment
    | SetPodSlurmState
)


def _older_than(moment: datetime | None, now: datetime, age: timedelta) -> bool:
    return moment is None or now - moment >= age


def _fail(node: SlurmNode, pod: PodView | None, kind: str, message: str) -> list[Action]:
    actions: list[Action] = []
    reason = Reason(kind, message)
    admin_reason = node.reason if node.reason and not node.has_our_reason else ""
    if not (node.is_down and node.reason.startswith(reason.text)):
        actions.append(
            MarkDown(
                node.name,
                reason,
                unless_pod_exists=kind == "PodMissing",
                admin_reason=admin_reason,
            )
        )
    if pod is not None and not pod.deleting:
        actions.append(DeletePod(node.name, f"{kind}: {message}", pod.uid))
    # No power down yet: power_down_force clears DOWN and the reason, so the node is held DOWN
    # (visible in sinfo -R, a pause before Slurm retries it) and powered down after the hold.
    return actions


def _plan_powering_down(
    node: SlurmNode, pod: PodView | None, now: datetime, guards: Guards
) -> list[Action]:
    """A node Slurm powered (or is powering) down: its pod goes; a failed node is held DOWN."""
    pod_settled = pod is not None and _older_than(pod.known_since, now, guards.pod_age_guard)
    actions: list[Action] = []
    if pod is not None and not pod.deleting and pod_settled:
        state = "powered down" if node.is_powered_down else "powering down"
        actions.append(DeletePod(node.name, f"Slurm node is {state}", pod.uid))
    held = not _older_than(node.reason_since, now, guards.failed_node_hold)
    if node.is_powered_down and node.is_down and node.has_our_reason and pod is None and not held:
        actions.append(ResumeNode(node.name, f"held DOWN for {guards.failed_node_hold}"))
    return actions


def _plan_down(node: SlurmNode, pod: PodView | None, now: datetime, guards: Guards) -> list[Action]:
    """A node we set DOWN: the pod goes, then the node is powered down after the hold."""
    if not node.has_our_reason:
        return []  # an admin's DOWN: not ours to touch
    if pod is not None and not pod.deleting:
        if node.is_busy:
            return []  # Slurm is still cleaning up a job there: its slurmd must stay for that
        return [DeletePod(node.name, f"Down: {node.reason.removeprefix(REASON_PREFIX)}", pod.uid)]
    if pod is None and _older_than(node.reason_since, now, guards.failed_node_hold):
        # Held long enough: without a power down the node would sit in down#/down until
        # ResumeTimeout, or for good when it was up; powered down it returns to idle~.
        return [PowerDown(node.name, f"held DOWN for {guards.failed_node_hold}")]
    return []


def _plan_wanted(node: SlurmNode, pod: PodView | None, pool: NodePool) -> list[Action]:
    """A node Slurm wants up (powering up, or registered) whose pod is not failing."""
    if pod is not None and pod.deleting:
        if node.is_powering_up:
            # The previous cycle's pod is still terminating (or this one was just evicted):
            # its state is not this cycle's. Create a new pod once it is gone.
            return []
        failure = pod.failure or TERMINATING
        return _fail(node, pod, failure.reason, failure.message)
    if node.is_powering_up:
        if pod is None:
            return [CreatePod(node.name, pool.name, "Slurm node is powering up and has no pod")]
        return []
    if pod is None:
        if node.power_down_imminent:
            # E.g. right after our own power_down_force: Slurm is about to power it down, and
            # no job needs a slurmd there; calling it PodMissing would overwrite the real reason.
            # A busy node's power down waits for its job, which lost its slurmd with the pod.
            return []
        return _fail(
            node, None, "PodMissing", f"no pod for node {node.name}; Slurm thinks it is up"
        )
    return []


def _plan_cordoned(node: SlurmNode, pod: PodView | None, cordoned: frozenset[str]) -> list[Action]:
    """Kubernetes is draining the pod's host: let Slurm drain the node first, so that its jobs
    end before the pod goes (a pod disruption budget keeps ``kubectl drain`` waiting)."""
    if pod is None or pod.deleting or not pod.host or pod.host not in cordoned:
        return []
    if not node.wants_pod:
        return []
    if node.power_down_queued and node.has_our_reason:
        return []  # asked already; Slurm powers it down when its jobs end
    if node.is_drained and not node.has_our_reason:
        # An admin's drain: theirs to lift. Slurm powers an idle drained node down after
        # SuspendTime anyway, and the drain keeps new jobs off it meanwhile.
        return []
    message = f"kubernetes node {pod.host} is cordoned; powered down when its jobs end"
    return [PowerDownAsap(node.name, our_reason("Cordoned", message))]


def _plan_rollout(node: SlurmNode, pod: PodView | None, current_hash: str) -> list[Action]:
    """Replace a pod of an older template through Slurm: drain, power down when idle, resume."""
    if pod is None or pod.deleting or not pod.template_hash or not current_hash:
        return []  # "" is a pod of an older bridge: unknown, so upgrading the bridge rolls nothing
    if pod.template_hash == current_hash or not node.wants_pod or node.is_powering_up:
        # Powering up: a job is waiting for this very pod; it rolls once that job is done.
        return []
    if node.power_down_queued and node.has_our_reason:
        return []  # asked already: Slurm powers it down when its jobs end
    if node.reason and not node.has_our_reason:
        return []  # an admin's drain: their reason is not ours to overwrite
    change = f"pool {pod.pool or '?'} template {pod.template_hash} -> {current_hash}"
    return [PowerDownAsap(node.name, our_reason("Rollout", change))]


def _plan_unpooled(
    node: SlurmNode, pod: PodView | None, now: datetime, guards: Guards
) -> list[Action]:
    """A CLOUD node Slurm knows and no pool owns any more (a reload shrank or removed its pool,
    or a typo in the hostlist) whose pod is still here: its jobs come first. The node is drained
    through Slurm, which powers it down once they end; only then does the pod go. Deleting it at
    once (as an orphan) killed the jobs and left the node DOWN and unmanaged."""
    if pod is None:
        return []  # nothing of ours: the node is Slurm's and the admin's alone
    stuck = _plan_stuck(pod, now, guards)
    if pod.deleting:
        return stuck
    if not node.wants_pod:
        # Powered down (or on its way, or DOWN): no job needs this slurmd any more. The suspend
        # itself was refused (no pool owns the node), so the pod goes here.
        if _older_than(pod.known_since, now, guards.pod_age_guard):
            return [DeletePod(node.name, "orphan pod: no pool owns it", pod.uid)]
        return []
    if node.power_down_queued or node.is_powering_up:
        # Asked already (by us or an admin), or a job waits for this very pod: in the second
        # case it is drained once it registered, on a later pass.
        return []
    if node.reason and not node.has_our_reason:
        # An admin's drain or reason stays theirs; Slurm powers an idle drained node down after
        # SuspendTime anyway, and then the pod goes (above).
        return []
    message = "no pool owns it since a configuration change; powered down when its jobs end"
    return [PowerDownAsap(node.name, our_reason("PoolRemoved", message))]


def _plan_stuck(pod: PodView | None, now: datetime, guards: Guards) -> list[Action]:
    if pod is None or not pod.deleting or pod.deletion_deadline is None:
        return []
    if pod.deletion_grace_s == 0:
        # Force-deleted already: what keeps the pod now is a finalizer, which no second force
        # delete (and its Warning Event, every pass) removes. Its owner has to act.
        return []
    overdue = now - pod.deletion_deadline
    if overdue < guards.terminating_margin:
        return []
    return [
        ForceDeletePod(
            pod.node,
            pod.uid,
            f"still terminating {int(overdue.total_seconds())}s past its grace period "
            f"(node {pod.host or '?'} does not confirm: kubelet gone?)",
        )
    ]


def _plan_address(node: SlurmNode, pod: PodView | None) -> list[Action]:
    if not node.address:
        return []  # Slurm did not say: nothing to compare with
    if pod is not None and pod.ip and not pod.deleting and node.wants_pod:
        if node.address != pod.ip:
            return [SetAddress(node.name, pod.ip, f"pod {pod.name} has IP {pod.ip}")]
        return []
    if pod is None and node.is_powered_down and node.address != node.name:
        return [SetAddress(node.name, node.name, f"no pod: {node.address} is no longer its IP")]
    return []


#: The start of every waiting Comment of ours.
WAITING_PREFIX = our_reason("waiting", "")


def _plan_comment(node: SlurmNode, waiting: str, pod: PodView | None) -> list[Action]:
    if waiting:
        if node.comment and not node.comment.startswith(REASON_PREFIX):
            return []  # an admin's comment: theirs, not ours to replace (issue 29 item 10)
        return [] if node.comment == waiting else [SetComment(node.name, waiting)]
    if pod is None and node.is_powering_up and node.comment.startswith(WAITING_PREFIX):
        # The create path's wait for capacity (a full quota): it holds until a pod exists, or
        # Slurm stops powering the node up.
        return []
    facts = pod_comment(pod) if pod is not None and node.wants_pod else ""
    if facts:
        if node.comment == facts or (node.comment and not node.comment.startswith(REASON_PREFIX)):
            return []  # already says so, or an admin's comment: theirs, not ours to replace
        return [SetComment(node.name, facts)]
    if node.comment.startswith(REASON_PREFIX):
        return [SetComment(node.name, "")]
    return []


def _plan_pod_state(node: SlurmNode, pod: PodView | None, actions: list[Action]) -> list[Action]:
    """The pod's label and condition follow the node's state, unless the pod is on its way out
    (a patch to a pod being deleted is wasted work): deleting, deleted this pass, or its node's
    power down imminent. The last matters at scale: ``power_down_force`` on nodes still powering
    up changes their word (POWERING_UP is cleared) about a second before Slurm suspends them,
    and a pass in that second would patch every one of those pods just before deleting it."""
    if pod is None or pod.deleting or node.power_down_imminent:
        return []
    if any(isinstance(a, DeletePod | ForceDeletePod) for a in actions):
        return []
    state, registered = slurm_state_word(node), is_registered(node)
    if pod.slurm_state == state and pod.registered is registered:
        return []
    return [
        SetPodSlurmState(node.name, state, registered, pod.slurm_state, pod.registered, pod.uid)
    ]


def plan_node(
    node: SlurmNode,
    pod: PodView | None,
    pool: NodePool,
    now: datetime,
    guards: Guards,
    *,
    events: Iterable[ScaleUpEvent] = (),
    cordoned: frozenset[str] = frozenset(),
    current_hash: str = "",
    group: PodGroupView | None = None,
) -> list[Action]:
    """The actions for one node that a pool owns and Slurm knows; ``cordoned`` names the
    Kubernetes nodes marked unschedulable, ``current_hash`` is the pool's template hash now
    ("" for unknown: no rollout), ``group`` the PodGroup the pod was created in."""
    waiting = ""
    if node.is_powered_down or node.is_powering_down:
        actions = _plan_powering_down(node, pod, now, guards)
    elif node.is_down:
        actions = _plan_down(node, pod, now, guards)
    else:
        verdict = None
        if pod is not None and not pod.deleting:
            verdict = judge_pod(pod, pool.patience, events, now, group)
        if isinstance(verdict, Fail):
            actions = _fail(node, pod, verdict.reason, verdict.message)
        else:
            if isinstance(verdict, Wait):
                waiting = our_reason("waiting", verdict.why)
            # A cordoned host wins over a rollout: both replace the pod through Slurm, once.
            replace = _plan_cordoned(node, pod, cordoned) or _plan_rollout(node, pod, current_hash)
            actions = [*_plan_wanted(node, pod, pool), *replace]
    actions = [*actions, *_plan_stuck(pod, now, guards)]
    return [
        *actions,
        *_plan_comment(node, waiting, pod),
        *_plan_address(node, pod),
        *_plan_pod_state(node, pod, actions),
    ]


def plan(
    slurm_nodes: Iterable[SlurmNode],
    pods: Iterable[PodView],
    pools: PoolSet,
    now: datetime,
    guards: Guards,
    *,
    events: Iterable[ScaleUpEvent] = (),
    cordoned: frozenset[str] = frozenset(),
    current_hashes: Mapping[str, str] | None = None,
    pod_groups: Iterable[PodGroupView] = (),
) -> list[Action]:
    """Everything to do so that Slurm's and Kubernetes' views agree, in a stable order.

    ``events`` are what a cluster autoscaler said about our pods (see ``verdict.judge_pod``);
    ``cordoned`` the Kubernetes nodes marked unschedulable (``spec.unschedulable``);
    ``current_hashes`` maps pool name to its template hash now (``pool_template_hash``): pods
    of another hash are rolled. None or a pool missing: no rollout. ``pod_groups``: the
    bridge's PodGroups (gang scheduling; none when it is off), whose word fails a gang's pods
    and whose leftovers are deleted.
    """
    hashes = current_hashes or {}
    scale_events = tuple(events)
    nodes: Mapping[str, SlurmNode] = {n.name: n for n in slurm_nodes}
    pod_list = list(pods)
    by_node: Mapping[str, PodView] = {p.node: p for p in pod_list}
    groups = list(pod_groups)
    group_by_name: Mapping[str, PodGroupView] = groups_in_view(groups, pod_list)
    actions: list[Action] = []
    for name in sorted(set(nodes) | set(by_node)):
        node, pod = nodes.get(name), by_node.get(name)
        pool = pools.pool_for(name)
        if node is not None and pool is None:
            actions.extend(_plan_unpooled(node, pod, now, guards))
            continue
        if node is None or pool is None:
            if (
                pod is not None
                and not pod.deleting
                and _older_than(pod.known_since, now, guards.pod_age_guard)
            ):
                owner = "no pool owns it" if pool is None else "Slurm does not know it"
                actions.append(DeletePod(name, f"orphan pod: {owner}", pod.uid))
            actions.extend(_plan_stuck(pod, now, guards))
            continue
        actions.extend(
            plan_node(
                node,
                pod,
                pool,
                now,
                guards,
                events=scale_events,
                cordoned=cordoned,
                current_hash=hashes.get(pool.name, ""),
                group=group_by_name.get(pod.pod_group) if pod and pod.pod_group else None,
            )
        )
    for name in stale_pod_groups(groups, pod_list, now, guards.pod_group_age_guard):
        actions.append(DeletePodGroup(name, "no pod names it any more"))
    return actions
