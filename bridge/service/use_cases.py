"""Use cases: what Slurm's hooks ask for, the reconcile pass, and the status view.

The service holds no state of its own beyond a lock, the nodes whose pods an accepted resume
is creating right now, and the pod states it patched lately (until the watch shows them): Slurm
(node power flags, reasons) and Kubernetes (labelled pods) are the truth, so a restarted bridge
picks up where it left off.

The use cases read here in one sitting; their parts live with collaborators the service holds:
:mod:`.node_failures` (nodes set DOWN, and their jobs), :mod:`.pool_breakers`,
:mod:`.slurm_plan_writer` and :mod:`.pod_state_writer` (a plan's other writes).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from bridge.domain.circuit import PoolBreakerStatus
from bridge.domain.gang_mode import GANG_MODE_OFF, GangMode
from bridge.domain.gangs import gang_members
from bridge.domain.hostlist import compress, expand, is_hostlist_name
from bridge.domain.node_names import split_hostlist
from bridge.domain.node_status import node_statuses
from bridge.domain.nodes import SlurmNode
from bridge.domain.pod_groups import PodGroupView
from bridge.domain.pod_rendering import each_pod, pool_template_hash
from bridge.domain.pods import UNSCHEDULABLE, PodView
from bridge.domain.pools import NodePool, PoolSet
from bridge.domain.reason import Reason, our_reason
from bridge.domain.reconcile import (
    Action,
    CreatePod,
    DeletePod,
    DeletePodGroup,
    ForceDeletePod,
    Guards,
    MarkDown,
    SetComment,
    SetPodSlurmState,
    plan,
    plan_node,
)
from bridge.domain.results import ErrorClass, NodeResult, NodeStatus, Outcome
from bridge.domain.resume_file import ResumeJob, job_ids_by_node, resume_jobs
from bridge.domain.stuck import DEFAULT_AFTER, Sighting, find_stuck, track
from bridge.domain.verdict import Fail, Patience, ScaleUpEvent, Verdict, Wait, judge_refusal
from bridge.errors import (
    BridgeError,
    InvalidInput,
    NoCapacity,
    TransientBackendError,
)
from bridge.metrics import BridgeMetrics
from bridge.service.cordons import CordonedNodes
from bridge.service.node_failures import JobAwareFailure
from bridge.service.pod_groups import PodGroups
from bridge.service.pod_state_writer import PodStateWriter
from bridge.service.pool_breakers import PoolBreakers
from bridge.service.ports import CordonLister, PodLister, PodPort, SlurmPort
from bridge.service.resume_dispatcher import ResumeDispatcher
from bridge.service.slurm_plan_writer import SlurmPlanWriter
from bridge.settings import BridgeConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _ResumeCall:
    """A resume call once checked, before any pod: the hostlist's names in order, the usable
    nodes by pool, the refused ones, and the resume file's jobs."""

    names: list[str]
    groups: dict[str, list[str]]
    rejected: list[NodeResult]
    jobs: list[ResumeJob]


def _error_class(error: BridgeError) -> ErrorClass:
    if isinstance(error, NoCapacity):
        return ErrorClass.NO_CAPACITY
    if isinstance(error, TransientBackendError):
        return ErrorClass.TRANSIENT
    if isinstance(error, InvalidInput):
        return ErrorClass.INVALID
    return ErrorClass.INTERNAL


class BridgeService:
    """Resume, suspend, fail, reconcile and report, for the pools in one configuration."""

    def __init__(
        self,
        config: BridgeConfig,
        slurm: SlurmPort,
        pods: PodPort,
        *,
        pod_views: PodLister | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        metrics: BridgeMetrics | None = None,
        cordons: CordonLister | None = None,
        gang: GangMode = GANG_MODE_OFF,
    ) -> None:
        self.config = config
        self.slurm = slurm
        self.pods = pods
        #: Where reconcile and status read the pods: the watch-fed cache when the app has one
        #: (no list per pass), else ``pods`` itself.
        self.pod_views: PodLister = pod_views or pods
        #: The cordoned Kubernetes nodes, read once per pass; None: no cordon handling.
        self.cordons = CordonedNodes(cordons) if cordons is not None else None
        self.clock = clock
        #: Where the use cases report what they saw; an unserved registry when not given.
        #: Its times are time.monotonic(), not ``clock``: latencies need a clock that never
        #: steps, ``clock`` is the decisions' notion of now.
        self.metrics = metrics if metrics is not None else BridgeMetrics()
        self.guards = Guards(
            pod_age_guard=timedelta(seconds=config.bridge.pod_age_guard_s),
            failed_node_hold=timedelta(seconds=config.bridge.failed_node_hold_s),
            terminating_margin=timedelta(seconds=config.bridge.terminating_margin_s),
        )
        # One reconcile pass at a time; RPCs and the loop may both ask for one.
        self._reconcile_lock = threading.Lock()
        #: When each pool node was first seen in its current state and phase (``status`` calls),
        #: so that a stuck case with no clock of its own is judged on a one-shot call too.
        self._sightings: dict[str, Sighting] = {}
        #: Node → when a full quota first refused its pod: the wait is timed from there
        #: (the pool's schedule_timeout), across the reconciler's retries of the create.
        self._capacity_waits: dict[str, datetime] = {}
        self._capacity_lock = threading.Lock()
        #: The autoscaler's words the current pass planned with: a DOWN is planned again with
        #: the pod read live (:meth:`_failure_confirmed`) on the same evidence.
        self._pass_events: tuple[ScaleUpEvent, ...] = ()
        self._sightings_lock = threading.Lock()
        #: Creates for the resumes answered before their pods exist (accept_resume).
        self.resumes = ResumeDispatcher()
        #: Suspend and resume-fail calls whose deletes run now (see :meth:`busy`).
        self._deleting = 0
        self._deleting_lock = threading.Lock()
        #: Sets failed nodes DOWN, and for a fail-fast comments and releases their jobs.
        self.failures = JobAwareFailure(slurm, self.metrics)
        #: Each pool's circuit breaker over fail-fasts.
        self.pool_breakers = PoolBreakers(config, self._now)
        #: Carries out a plan's NodeAddr, comment and power actions.
        self.slurm_writes = SlurmPlanWriter(slurm)
        #: Patches the pods' Slurm state, once per change although the watch lags behind.
        self.pod_states = PodStateWriter(pods)
        #: Each pool's template hash now: pods of another one are rolled (issue 14).
        self.template_hashes = template_hashes(config)
        #: A multi-node job's PodGroup (gang scheduling): made before its pods, read and
        #: collected by the reconcile pass; ``pod_groups.mode`` says whether it is on.
        self.pod_groups = PodGroups(pods, gang)
        #: The PodGroups the current pass planned with, by name (see ``_pass_events``).
        self._pass_groups: dict[str, PodGroupView] = {}

    def _now(self) -> datetime:
        """``self.clock()``, looked up at each call: tests move the clock after construction,
        and the collaborators given this see the move."""
        return self.clock()

    @property
    def state_sent_memory_s(self) -> float:
        """How long a patched pod state stands in for the watch's view of it."""
        return self.pod_states.memory_s

    @state_sent_memory_s.setter
    def state_sent_memory_s(self, seconds: float) -> None:
        self.pod_states.memory_s = seconds

    def replace_pools(self, pools: PoolSet) -> dict[str, str]:
        """Take over a reloaded configuration's pools between two reconcile passes; returns the
        pools' template hashes now. Breakers keep what the pools still configured counted."""
        with self._reconcile_lock:
            config = dataclasses.replace(self.config, pools=pools)
            self.pool_breakers.reconfigure(config)
            self.template_hashes = template_hashes(config)
            # Last: RPCs read self.config without the lock, and see the old or the new one.
            self.config = config
            self._warn_unpooled_pods()
            return dict(self.template_hashes)

    def _warn_unpooled_pods(self) -> None:
        """Say loudly when the new pools leave pods of ours without a pool: a typo in a
        hostlist is enough, and those nodes are now drained and powered down."""
        try:
            pods, _ = self.pod_views.list_pods()
        except BridgeError as e:
            log.warning(
                "config reload: cannot list pods to check for nodes left without a pool: %s", e
            )
            return
        left = sorted(p.node for p in pods if not self.config.pools.owns(p.node))
        if left:
            log.warning(
                "config reload: %d node(s) with pods are in no pool now: %s; they are drained "
                "through Slurm (k8s: PoolRemoved) and their pods go once their jobs ended and "
                "Slurm powered them down. If the change was a mistake, restore the pools: the "
                "drain is lifted when Slurm powers them down, not before",
                len(left),
                compress(left),
            )

    # -- hooks -----------------------------------------------------------------------------------

    def _split(self, hostlist: str) -> tuple[list[str], dict[str, list[str]], list[NodeResult]]:
        """:func:`split_hostlist` with this configuration's pools, and a warning naming the
        rejected names."""
        names, groups, rejected = split_hostlist(
            hostlist, self.config.pools, self.config.source or "config"
        )
        if rejected:
            log.warning(
                "rejected %d node(s), Slurm left alone: %s",
                len(rejected),
                "; ".join(r.message for r in rejected[:5]),
            )
        return names, groups, rejected

    # -- circuit breaker -------------------------------------------------------------------------

    def pool_status(self) -> list[PoolBreakerStatus]:
        """Every pool's circuit breaker (``pool list``)."""
        return self.pool_breakers.status()

    def resume_pool(self, pool: str, request_id: str) -> tuple[PoolBreakerStatus, bool]:
        """Close ``pool``'s breaker by hand (``pool resume``); its state afterwards, and whether
        it was paused. An unknown pool is :class:`InvalidInput` naming it."""
        if self.config.pools.by_name(pool) is None:
            names = ", ".join(p.name for p in self.config.pools)
            raise InvalidInput(f"pool: {pool!r} is not a configured pool (pools: {names})")
        return self.pool_breakers.resume(pool, request_id)

    def gang_scheduling(self) -> GangMode:
        """Whether a multi-node job's pods go in one PodGroup, and why not (ListPools)."""
        return self.pod_groups.mode

    def _fail_fasts(self, nodes: Sequence[str], reason: Reason) -> None:
        """Count a fail-fast per node of ``nodes`` (set DOWN with ``reason``) against its pool."""
        self.pool_breakers.record_fail_fasts(self.config.pools, nodes, reason)

    def _validate_resume(self, hostlist: str, resume_file: str, request_id: str) -> _ResumeCall:
        """What both resume paths do before any pod: :meth:`_split`, the resume file's jobs (a
        bad file costs only the per-job context and the gangs), and the resume latency's
        start."""
        names, groups, rejected = self._split(hostlist)
        arrived = time.monotonic()
        for members in groups.values():
            for node in members:
                self.metrics.resume_called(node, arrived)
        try:
            jobs = resume_jobs(resume_file)
        except InvalidInput as e:
            log.warning("request %s: %s (resuming the hostlist anyway)", request_id, e)
            jobs = []
        return _ResumeCall(names, groups, rejected, jobs)

    def resume(self, hostlist: str, resume_file: str, request_id: str) -> list[NodeResult]:
        """Create one pod per node and answer when every create ended (ResumeNodes with wait);
        Kubernetes' refusals set the node DOWN with our reason."""
        call = self._validate_resume(hostlist, resume_file, request_id)
        created = self._create(call.groups, request_id, call.jobs)
        return in_order(call.names, call.rejected + created)

    def accept_resume(
        self,
        hostlist: str,
        resume_file: str,
        request_id: str,
        *,
        answered: threading.Event | None = None,
    ) -> list[NodeResult]:
        """Validate now, create the pods in the background (ResumeNodes without wait).

        ACCEPTED per usable node, REJECTED as in :meth:`resume`; the creates' results reach
        Slurm as they do there (a refusal for good sets the node DOWN), with no answer to the
        caller. The creates start once ``answered`` is set (the caller has its answer). Raises
        :class:`BridgeStopping` once :meth:`close` was called.
        """
        call = self._validate_resume(hostlist, resume_file, request_id)
        usable = [n for members in call.groups.values() for n in members]
        if usable:

            def create(nodes: list[str]) -> None:
                # ``nodes``: those of the call no other resume is creating; the gangs are
                # formed of them alone (a pod made elsewhere would never carry the group).
                groups = self.config.pools.group(nodes)[0]
                self._create(groups, request_id, call.jobs)

            queued = self.resumes.submit(usable, create, request_id, hold=answered)
            if len(queued) < len(usable):
                log.info(
                    "request %s: %d node(s) already being created, not queued again",
                    request_id,
                    len(usable) - len(queued),
                )
        accepted = [NodeResult(n, Outcome.ACCEPTED) for n in usable]
        return in_order(call.names, call.rejected + accepted)

    def busy(self) -> bool:
        """Whether a burst of pod calls is under way: a resume's creates queued or running, or a
        suspend's (a resume-fail's) deletes. The reconcile loop spaces its passes and the pod
        watch reads in batches meanwhile: each of the burst's thousands of pod events would
        otherwise cost a pass or a wake-up on the cores the calls and the API server need."""
        with self._deleting_lock:
            if self._deleting:
                return True
        return self.resumes.busy()

    def _deleting_for(self, nodes: Iterable[str], request_id: str, why: str) -> list[NodeResult]:
        """:meth:`_delete` for a Slurm call, counted while it runs (:meth:`busy`)."""
        with self._deleting_lock:
            self._deleting += 1
        try:
            return self._delete(nodes, request_id, why)
        finally:
            with self._deleting_lock:
                self._deleting -= 1

    def close(self, timeout_s: float) -> None:
        """Take no new resumes; wait up to ``timeout_s`` for the queued creates (then drop them:
        their nodes stay POWERING_UP and the next start's reconciler creates the pods)."""
        self.resumes.close(timeout_s)

    def _create(
        self,
        groups: Mapping[str, list[str]],
        request_id: str,
        jobs: Sequence[ResumeJob] = (),
    ) -> list[NodeResult]:
        """Render and create the pods of ``groups`` (pool name → nodes); one result per node.
        ``jobs``: the resume file's (none for the reconciler's creates): each node's are named
        in its log line and Event, and with gang scheduling on the nodes of each multi-node job
        go in one PodGroup, created before them."""
        results, groups = self._refuse_paused(groups, request_id)
        job_ids = job_ids_by_node(jobs)
        settings = self.config.pod_settings()
        gangs = self.pod_groups.create(groups, jobs, request_id, settings)
        members = gang_members(gangs)
        rendered: list[tuple[NodePool, list[str]]] = []
        for pool_name, nodes in groups.items():
            pool = self.config.pools.by_name(pool_name)
            if pool is None:  # group() only returns names of pools it has
                raise BridgeError(f"internal: pool {pool_name!r} vanished")
            if nodes:
                rendered.append((pool, nodes))
        # Rendered as they are sent: the first create starts with the first pod, not the last.
        manifests = (
            manifest
            for pool, nodes in rendered
            for manifest in each_pod(pool, nodes, settings, pod_groups=members)
        )
        outcome = self.pods.create_pods(manifests) if rendered else {}
        self.pod_groups.shrink_short(gangs, outcome, request_id)
        failed: dict[Reason, list[str]] = defaultdict(list)
        waits: list[SetComment] = []
        for node, result in outcome.items():
            if isinstance(result, BridgeError):
                verdict, comment = self._refused(node, result, request_id)
                if isinstance(verdict, Wait):  # taken: the reconciler creates it when there is room
                    results.append(NodeResult(node, Outcome.ACCEPTED))
                else:
                    error_class = _error_class(result)
                    results.append(NodeResult(node, Outcome.FAILED, error_class, str(result)))
                if isinstance(verdict, Fail):
                    failed[Reason(verdict.reason, verdict.message)].append(node)
                waits += comment
                continue
            results.append(self._created(node, result, job_ids.get(node, []), request_id))
        if waits:
            self.slurm_writes.write(waits)
        # Kubernetes said no for good: fail fast so Slurm requeues instead of waiting.
        every_failed = [n for nodes in failed.values() for n in nodes]
        if not every_failed:
            return results
        # One read of the pools' nodes for every reason: which nodes are CLOUD, and the jobs'
        # other nodes (only a pool's are ever released).
        try:
            snapshot = self.slurm.list_nodes(self.config.pools.all_nodes())
        except BridgeError as e:
            # Unsure what they are: leave Slurm alone; the reconciler tries again next pass.
            log.warning("not setting %s DOWN: cannot read Slurm: %s", compress(every_failed), e)
            return results
        down_by_reason = {
            (reason, ""): down
            for reason, nodes in failed.items()
            if (down := self.failures.cloud_nodes(nodes, snapshot))
        }
        pools = self.config.pools
        for reason, down in self.failures.mark_down_groups(pools, down_by_reason, snapshot):
            self._fail_fasts(down, reason)
        return results

    def _created(
        self, node: str, created: bool, jobs: Sequence[int], request_id: str
    ) -> NodeResult:
        """A create that went through (``created``) or found the pod there: logged, an Event."""
        with self._capacity_lock:
            self._capacity_waits.pop(node, None)
        job_ids = ",".join(map(str, jobs)) or "-"
        if created:
            self.pods.record_event(
                node, "SlurmResume", f"Slurm resumed node {node} (jobs {job_ids})"
            )
        log.info(
            "request %s: pod %s %s (jobs %s)",
            request_id,
            node,
            "created" if created else "exists already",
            job_ids,
        )
        return NodeResult(node, Outcome.OK)

    def _refuse_paused(
        self, groups: Mapping[str, list[str]], request_id: str
    ) -> tuple[list[NodeResult], dict[str, list[str]]]:
        """The nodes of paused pools, set DOWN with the pause's reason, and the groups left."""
        results: list[NodeResult] = []
        paused = self.pool_breakers.paused_pools(groups)
        for pool_name, reason in paused.items():
            nodes = groups[pool_name]
            log.warning("request %s: not creating %s: %s", request_id, compress(nodes), reason)
            results += [
                NodeResult(n, Outcome.FAILED, ErrorClass.NO_CAPACITY, reason.text) for n in nodes
            ]
            self.failures.mark_down(self.failures.cloud_nodes(nodes), reason)
        return results, {pool: nodes for pool, nodes in groups.items() if pool not in paused}

    def _refused(
        self, node: str, error: BridgeError, request_id: str
    ) -> tuple[Verdict, list[SetComment]]:
        """The verdict on a refused create, logged; with the Comment to write when a capacity
        wait starts: Kubernetes is full for now, the node stays POWERING_UP, the reconciler
        retries the create every pass, and the Comment says why (once)."""
        verdict, started = self._judge_refusal(node, error)
        if not isinstance(verdict, Wait):
            log.error("request %s: create pod %s failed: %s", request_id, node, error)
            return verdict, []
        if not started:
            log.debug("request %s: pod %s still waits: %s", request_id, node, error)
            return verdict, []
        log.warning("request %s: pod %s waits for capacity: %s", request_id, node, error)
        return verdict, [SetComment(node, our_reason("waiting", verdict.why))]

    def _judge_refusal(self, node: str, error: BridgeError) -> tuple[Verdict, bool]:
        """The verdict on a refused create, and whether it starts a capacity wait (a full
        quota refused this node for the first time)."""
        now = self.clock()
        pool = self.config.pools.pool_for(node)
        patience = pool.patience if pool is not None else Patience()
        with self._capacity_lock:
            started = isinstance(error, NoCapacity) and node not in self._capacity_waits
            since = (
                self._capacity_waits.setdefault(node, now) if isinstance(error, NoCapacity) else now
            )
            verdict = judge_refusal(error, since=since, patience=patience, now=now)
            if not isinstance(verdict, Wait):
                self._capacity_waits.pop(node, None)
        return verdict, started

    def _forget_capacity_waits(self, nodes: Sequence[SlurmNode], pods: Sequence[PodView]) -> None:
        """Keep the waits of nodes still powering up without a pod: the rest got theirs, or
        Slurm gave up on them (ResumeTimeout, a suspend, a cancelled job)."""
        with_pod = {p.node for p in pods}
        waiting = {n.name for n in nodes if n.is_powering_up and n.name not in with_pod}
        with self._capacity_lock:
            for node in set(self._capacity_waits) - waiting:
                del self._capacity_waits[node]

    def _delete(
        self,
        nodes: Iterable[str],
        request_id: str,
        why: str,
        *,
        uids: Mapping[str, str] | None = None,
        grace_period_s: int | None = None,
    ) -> list[NodeResult]:
        results = []
        outcome = self.pods.delete_pods(list(nodes), uids=uids, grace_period_s=grace_period_s)
        for node, result in outcome.items():
            if isinstance(result, BridgeError):
                results.append(NodeResult(node, Outcome.FAILED, _error_class(result), str(result)))
                log.error("request %s: delete pod %s failed: %s", request_id, node, result)
            else:
                results.append(NodeResult(node, Outcome.OK))
                log.info(
                    "request %s: pod %s %s (%s)",
                    request_id,
                    node,
                    "deleted" if result else "already gone",
                    why,
                )
        return results

    def suspend(self, hostlist: str, request_id: str) -> list[NodeResult]:
        """Delete the nodes' pods; already-absent pods are success."""
        names, groups, rejected = self._split(hostlist)
        nodes = [n for members in groups.values() for n in members]
        for node in nodes:
            self.metrics.forget(node)
        return in_order(
            names, rejected + self._deleting_for(nodes, request_id, "Slurm suspended the node")
        )

    def resume_failed(self, hostlist: str, request_id: str) -> list[NodeResult]:
        """Slurm gave up on these nodes (ResumeTimeout): remove whatever pod is left."""
        names, groups, rejected = self._split(hostlist)
        nodes = [n for members in groups.values() for n in members]
        for node in nodes:
            self.metrics.forget(node)
        deleted = self._deleting_for(nodes, request_id, "Slurm reported the resume as failed")
        return in_order(names, rejected + deleted)

    def node_event(
        self, kind: str, hostlist: str, reason: str, request_id: str
    ) -> list[NodeResult]:
        """A node event from strigger: converge now instead of at the next poll."""
        names, groups, rejected = self._split(hostlist)
        log.info("request %s: node event %s for %s: %s", request_id, kind, hostlist, reason)
        self.reconcile_once()
        nodes = [n for members in groups.values() for n in members]
        return in_order(names, rejected + [NodeResult(n, Outcome.OK) for n in nodes])

    # -- reconcile -------------------------------------------------------------------------------

    def observe(
        self,
    ) -> tuple[list[SlurmNode], list[PodView], list[ScaleUpEvent], list[PodGroupView]]:
        """Both views, the bridge's PodGroups (gang scheduling on), and, when some pod (or
        gang) is Unschedulable, what a cluster autoscaler said about our pods. Slurm's view
        holds only CLOUD nodes that a pool owns or that have a pod of ours, and only those are
        read (0.06 s where listing every node of a 10,000-node site took 1.5 s); a name
        slurm.conf lacks is not in it (Slurm skips it, see ``SlurmPort``).

        Slurm is read first: a node that registered by then had its pod created before, so the
        pod list that follows shows it (the other order calls a just-registered node's pod
        missing whenever scontrol is slow). In the running bridge the pods come from the
        watch-fed cache (``pod_views``), which sees a pod's ADDED event milliseconds after its
        create, long before its slurmd can register.
        """
        pools = self.config.pools
        listed = self.slurm.list_nodes(pools.all_nodes())
        pods, _ = self.pod_views.list_pods()
        # The nodes that still have a pod of ours but no pool: a reload that shrank a pool
        # leaves those, and the plan drains them through Slurm before their pods go. Read after
        # the pods, which name them (the order above matters for a node whose pod may be new;
        # these have theirs). A name no hostlist can carry is no Slurm node: it is not asked.
        strays = sorted(
            {p.node for p in pods if not pools.owns(p.node) and is_hostlist_name(p.node)}
        )
        if strays:
            listed += self.slurm.list_nodes(strays)
        # Only CLOUD nodes: a static node that shares a pool's name is never touched.
        nodes = [n for n in listed if n.is_cloud]
        groups = self.pod_groups.read()
        events: list[ScaleUpEvent] = []
        if any(p.holdup is not None and p.holdup.reason == UNSCHEDULABLE for p in pods) or any(
            g.unschedulable is not None for g in groups
        ):
            try:
                events = self.pods.list_scale_up_events()
            except BridgeError as e:
                # Without them the schedule timeout still decides, and a gang that cannot be
                # placed fails at once, as when no autoscaler spoke.
                log.warning("reconcile: autoscaler events not read: %s", e)
        return nodes, pods, events, groups

    def reconcile_once(self) -> list[Action]:
        """Observe both sides, plan, execute; returns what it did (for logs and tests)."""
        with self._reconcile_lock:
            started = time.monotonic()
            nodes, pods, events, groups = self.observe()
            self.metrics.observe_state(nodes, pods, time.monotonic())
            self._forget_capacity_waits(nodes, pods)
            now = self.clock()
            self.pool_breakers.expire_pauses(now)  # a pause's end is logged within a pass
            cordoned = self.cordons.read() if self.cordons is not None else frozenset()
            actions = plan(
                nodes,
                pods,
                self.config.pools,
                now,
                self.guards,
                events=events,
                cordoned=cordoned,
                current_hashes=self.template_hashes,
                pod_groups=groups,
            )
            if actions:
                self._pass_events = tuple(events)
                self._pass_groups = {g.name: g for g in groups}
                self.execute(actions, nodes)
            self.metrics.reconcile_pass(time.monotonic() - started, actions)
            return actions

    def execute(
        self, actions: Sequence[Action], snapshot: Sequence[SlurmNode] | None = None
    ) -> None:
        """Carry out a plan: Slurm first (so jobs requeue at once), then pods. ``snapshot``:
        the Slurm nodes the plan was made from, which the failure path reads instead of
        listing them again."""
        marks = [a for a in actions if isinstance(a, MarkDown)]
        downed = self._mark_down(marks, snapshot)
        # A failure not confirmed by a live read keeps its pod too (the plan pairs each DOWN
        # with the pod's delete): the next pass judges both again.
        kept = {a.node for a in marks} - downed
        deletes = [a for a in actions if isinstance(a, DeletePod) and a.node not in kept]
        for action in deletes:
            log.info("reconcile: delete pod %s: %s", action.node, action.why)
        if deletes:
            uids = {a.node: a.uid for a in deletes if a.uid}
            self._delete([a.node for a in deletes], "reconcile", "reconcile", uids=uids)
        forced = [a for a in actions if isinstance(a, ForceDeletePod)]
        for force in forced:
            log.warning("reconcile: force-delete pod %s: %s", force.node, force.why)
            self.pods.record_event(force.node, "SlurmForceDelete", force.why, warning=True)
        if forced:
            self._delete(
                [a.node for a in forced],
                "reconcile",
                "stuck terminating",
                uids={a.node: a.uid for a in forced},
                grace_period_s=0,
            )
        self.slurm_writes.write(actions)
        creates = self._not_in_flight([a for a in actions if isinstance(a, CreatePod)])
        if creates:
            # The plan knows each node's pool: no regrouping by hostlist.
            groups: dict[str, list[str]] = defaultdict(list)
            for create in creates:
                log.info("reconcile: create pod %s: %s", create.node, create.why)
                groups[create.pool].append(create.node)
            # Not self.resume: a pod the reconciler recreates starts no resume latency. It
            # has no resume file either, so it joins no gang: placed on its own.
            self._create(groups, "reconcile")
        self.pod_groups.delete([a for a in actions if isinstance(a, DeletePodGroup)])
        # Last: a record for kubectl, never in the way of what Slurm and its jobs wait for.
        self.pod_states.write([a for a in actions if isinstance(a, SetPodSlurmState)])

    def _mark_down(
        self, marks: Sequence[MarkDown], snapshot: Sequence[SlurmNode] | None
    ) -> set[str]:
        """The plan's DOWNs that a live read confirms, one Slurm write (and failing-jobs look)
        per distinct reason; the nodes whose DOWN was confirmed (and sent)."""
        down_by_reason: dict[tuple[Reason, str], list[str]] = defaultdict(list)
        still = self._still_wanting_pods([a.node for a in marks])
        for action in marks:
            now_in_slurm = still.get(action.node)
            if now_in_slurm is None:
                continue  # Slurm moved on (logged), or could not say
            if action.unless_pod_exists:
                if self._pod_exists(action.node):
                    log.info(
                        "reconcile: %s has a pod after all; not %s", action.node, action.reason
                    )
                    continue
            elif not self._failure_confirmed(action, now_in_slurm):
                continue
            down_by_reason[action.reason, action.admin_reason].append(action.node)
        taken = self.failures.mark_down_groups(self.config.pools, down_by_reason, snapshot)
        for reason, nodes in taken:
            self._fail_fasts(nodes, reason)
        for (reason, _), nodes in down_by_reason.items():
            for node in nodes:
                self.pods.record_event(
                    node, "SlurmNodeDown", f"Slurm node {node} set DOWN: {reason}", warning=True
                )
        return {n for nodes in down_by_reason.values() for n in nodes}

    def _still_wanting_pods(self, names: Sequence[str]) -> dict[str, SlurmNode]:
        """Those of ``names`` Slurm still expects a slurmd on, read live, as Slurm shows them
        now: the pass read Slurm before the pods, and a suspend (or an admin's DOWN) landing in
        between made the pod look failed or missing. Such a node is Slurm's own business now; a
        DOWN of ours would overwrite its reason and requeue nothing (issue 29 item 6).
        Unreadable: none (the next pass decides)."""
        if not names:
            return {}
        try:
            fresh = self.slurm.list_nodes(names)
        except BridgeError as e:
            log.warning("not setting %s DOWN: cannot read Slurm: %s", compress(names), e)
            return {}
        still = {n.name: n for n in fresh if n.wants_pod and not n.power_down_imminent}
        for node in fresh:
            if node.name not in still:
                log.info(
                    "reconcile: not setting %s DOWN: Slurm moved on since the pass read it (%s)",
                    node.name,
                    "+".join([node.state, *sorted(node.flags)]),
                )
        return still

    def _failure_confirmed(self, mark: MarkDown, node: SlurmNode) -> bool:
        """Whether the pod, read live now, still fails the node for the same reason: the pass
        judged the pod from the watch's cache, which is as old as the last event it got (during
        an API server outage, as old as the outage), so no DOWN is written on it alone (issue
        29 item 2). The live pod and Slurm's node as read just now are planned again; the API
        server unreachable: no DOWN (the next pass decides)."""
        pool = self.config.pools.pool_for(node.name)
        if pool is None:
            return False
        try:
            live = self.pods.read_pod(node.name)
        except BridgeError as e:
            log.warning(
                "reconcile: not setting %s DOWN (%s): pod not read again: %s",
                node.name,
                mark.reason,
                e,
            )
            return False
        group = self._pass_groups.get(live.pod_group) if live and live.pod_group else None
        again = plan_node(
            node,
            live,
            pool,
            self.clock(),
            self.guards,
            events=self._pass_events,
            group=group,
        )
        if any(isinstance(a, MarkDown) and a.reason.kind == mark.reason.kind for a in again):
            return True
        log.info(
            "reconcile: not setting %s DOWN (%s): the pod read again says otherwise (%s)",
            node.name,
            mark.reason,
            "gone" if live is None else live.phase,
        )
        return False

    def _not_in_flight(self, creates: Sequence[CreatePod]) -> list[CreatePod]:
        """Those of ``creates`` no accepted resume is creating now: a second create of each of a
        thousand nodes would double the apiserver's work while the first is under way."""
        busy = self.resumes.in_flight()
        if not busy:
            return list(creates)
        skipped = [a.node for a in creates if a.node in busy]
        if skipped:
            log.debug("reconcile: not creating %s: a resume is creating it", compress(skipped))
        return [a for a in creates if a.node not in busy]

    def _pod_exists(self, node: str) -> bool:
        try:
            return self.pods.pod_exists(node)
        except BridgeError as e:
            log.warning("reconcile: cannot re-check the pod of %s (%s); not failing it", node, e)
            return True

    # -- status ----------------------------------------------------------------------------------

    def list_nodes(self, hostlist: str, stuck_after: timedelta | None = None) -> list[NodeStatus]:
        """Slurm's state and the pod side by side, for every pool node (or the hostlist's), each
        judged stuck or not after ``stuck_after`` (None: :data:`DEFAULT_AFTER`). A case with no
        clock of its own is timed from when this bridge first saw the node so (earlier calls)."""
        names = expand(hostlist) if hostlist.strip() else self.config.pools.all_nodes()
        wanted = set(names)
        pods, _ = self.pod_views.list_pods()
        rows = node_statuses(
            wanted, self.slurm.list_nodes(names), pods, self.config.pools, self.template_hashes
        )
        now = self.clock()
        with self._sightings_lock:
            seen = {**self._sightings, **track(self._sightings, rows, now)}
            # Only pool nodes are remembered: the map stays as large as the pools.
            self._sightings = {n: s for n, s in seen.items() if self.config.pools.owns(n)}
            stuck = find_stuck(rows, now, stuck_after or DEFAULT_AFTER, self._sightings)
        why = {s.node: s.why for s in stuck}
        return [dataclasses.replace(r, stuck=why.get(r.node, "")) for r in rows]


def template_hashes(config: BridgeConfig) -> dict[str, str]:
    """Pool name → the hash its pods carry when rendered from ``config`` now."""
    settings = config.pod_settings()
    return {pool.name: pool_template_hash(pool, settings) for pool in config.pools}


def in_order(names: Sequence[str], results: Iterable[NodeResult]) -> list[NodeResult]:
    """``results`` in the order of ``names`` (the hostlist's), as the proto promises."""
    by_node = {r.node: r for r in results}
    return [by_node[n] for n in names if n in by_node]
