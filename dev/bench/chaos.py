"""`make chaos`: resume/suspend storms with faults injected at random points, then counts.

A second, self-contained Slurm cluster on the proving ground, sharing only its kube-apiserver,
kwok nodes, real kubelet and munged:

- its own slurmctld 22.05 (port 6827, state and logs under ``.local/chaos/``) with
  ``chaos-[0-N]`` CLOUD nodes backed by kwok pods and ``chaosreal-[0-3]`` backed by real slurmd
  pods on the real kubelet node (they register, so jobs run on them: "allocated" nodes);
- its own bridge (``slurm-k8s-bridge serve``, cluster ``chaos``, namespace ``skb-chaos``, its own
  ServiceAccount and socket); slurmctld's Resume/Suspend/ResumeFailProgram are the repository's
  ``slurm_plugins/`` hooks, reached through symlinks next to a ``hooks.env`` naming that socket.

Each round: a couple of real jobs are submitted to ``chaosreal``; ``--nodes`` kwok nodes are
powered up in random batches (``scontrol update state=power_up``), random subsets flap
(``power_down_force`` then ``power_up``), then all are powered down; meanwhile faults fire at
random points: SIGKILL of the bridge (restarted after 0-3 s), SIGSTOP of the bridge, SIGSTOP of
kube-apiserver (each ``--fault-seconds``), slurmctld restarted. Then a settle period, and counts:

- orphan pods: a pod whose Slurm node is powered down or powering down (not up, not powering up);
- duplicate pods: more than one pod object (terminating ones included) for one Slurm node;
- nodes POWERING_UP past ResumeTimeout (watched every ~2 s; Slurm's "ResumeTimeout reached" too);
- nodes DOWN without a reason;
- wrongly deleted pods: a pod gone or terminating while Slurm still has its node allocated to a
  running job (checked on the real ``chaosreal`` nodes; kwok nodes never run slurmd, so they are
  never allocated).

Exit status: 0 when every count is 0, 1 otherwise, 2 when the harness itself failed.
Everything it creates is removed at the end (processes by PID, the namespace, /etc/hosts lines,
``.local/chaos``); the logs stay in ``.local/chaos-logs/`` only when a count is non-zero.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "dev"))

from proving_ground import ground, images
from proving_ground.layout import APISERVER_PORT, HOST_IP, MUNGE_SOCKET, Layout
from proving_ground.processes import State
from proving_ground.slurm import controller_lines, render_options
from proving_ground.slurm_series import HOST_SERIES

from bridge.config import load_config
from bridge.domain.hostlist import expand
from bridge.domain.slurm_conf import render_slurm_conf

NAMESPACE = "skb-chaos"
CLUSTER = "chaos"
PORT = 6827
REAL_NODES = "chaosreal-[0-3]"
SERVICE_ACCOUNT = "slurm-k8s-bridge"
FAULT_KINDS = ("bridge_sigkill", "bridge_sigstop", "apiserver_sigstop", "slurmctld_restart")
HOSTS_FILE = Path("/etc/hosts")
HOSTS_BEGIN = "# >>> slurm-k8s-bridge chaos harness (dev/bench/chaos.py removes it)"
HOSTS_END = "# <<< slurm-k8s-bridge chaos harness"
SUSPEND_TIMEOUT = 10
RECONCILE_S = 5
POD_AGE_GUARD_S = 10
FAILED_NODE_HOLD_S = 20
POLL_S = 2.0
#: The ground's allow-lists for the admission guard (its namespace's annotations).
NAMESPACE_MANIFEST = ROOT / "dev" / "proving_ground" / "namespace" / "allow-lists.yaml"
ALLOW_LIST_PREFIX = "slurm-k8s-bridge.io/allowed-"
#: Lists deploy/kustomize/namespace/admission-policy.yaml reads without which a namespace gets
#: no pod of the ground's pools at all.
ALLOW_LISTS = (
    f"{ALLOW_LIST_PREFIX}images",
    f"{ALLOW_LIST_PREFIX}host-paths",
    f"{ALLOW_LIST_PREFIX}secrets",
    f"{ALLOW_LIST_PREFIX}pod-options",
)


def say(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def reason_kind(reason: str) -> str:
    """``k8s: BridgeUnreachable: ...`` → ``BridgeUnreachable``; Slurm's own reasons whole."""
    if reason.startswith("k8s:"):
        return reason.split(":")[1].strip()
    return reason.split("[", maxsplit=1)[0].strip()


def proc_start(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def allow_list_annotations(manifest: Path = NAMESPACE_MANIFEST) -> dict[str, str]:
    """The ``slurm-k8s-bridge.io/allowed-*`` annotations of the ground's namespace manifest:
    chaos's namespace carries the same, since the admission guard checks the bridge's pods in
    every namespace against that namespace's allow-lists."""
    document = yaml.safe_load(manifest.read_text())
    metadata = document.get("metadata") if isinstance(document, dict) else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    found = {
        str(name): str(value)
        for name, value in (annotations if isinstance(annotations, dict) else {}).items()
        if str(name).startswith(ALLOW_LIST_PREFIX)
    }
    missing = [name for name in ALLOW_LISTS if name not in found]
    if missing:
        raise RuntimeError(
            f"{manifest}: metadata.annotations has no {', '.join(missing)}: the admission guard "
            f"would refuse every bridge pod in namespace {NAMESPACE}"
        )
    return found


@dataclass
class Counts:
    """What the table reports."""

    faults: Counter[str] = field(default_factory=Counter)
    orphans: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    stuck: set[str] = field(default_factory=set)
    down_no_reason: list[str] = field(default_factory=list)
    wrongly_deleted: list[str] = field(default_factory=list)
    # Information, not failures:
    down_with_reason: Counter[str] = field(default_factory=Counter)
    pods_seen: set[str] = field(default_factory=set)
    scontrol_refused: int = 0
    real_jobs: int = 0
    real_jobs_ran: set[str] = field(default_factory=set)
    unsettled_rounds: int = 0
    peak_powering_up: int = 0
    peak_pods: int = 0


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)  # noqa: S311 (a reproducible plan, not a secret)
        self.layout = Layout.default()
        self.dir = self.layout.local / "chaos"
        self.logs = self.dir / "logs"
        self.conf = self.dir / "slurm.conf"
        self.socket = self.dir / "bridge.sock"
        self.hooks = self.dir / "hooks"
        self.bridge_yaml = self.dir / "bridge.yaml"
        self.kubeconfig = self.dir / "bridge.kubeconfig"
        self.pids_file = self.dir / "pids.json"
        self.pool_size = max(256, args.nodes)
        self.kwok_nodes = [f"chaos-{i}" for i in range(self.pool_size)]
        self.real_nodes = expand(REAL_NODES)
        # Slurm must not give up on a node the storm still holds up: the longest a node stays
        # POWERING_UP by design is one storm window; ResumeTimeout leaves 90 s beyond it.
        self.window = max(args.storm_seconds, args.faults_per_round * (args.fault_seconds + 8) + 15)
        self.resume_timeout = int(self.window + 90)
        self.procs: dict[str, tuple[int, str]] = {}
        self.stopped: dict[int, str] = {}  # pid → what, while SIGSTOPped by us
        self.lock = threading.Lock()
        self.counts = Counts()
        self.releasing = threading.Event()
        self.monitor_stop = threading.Event()
        self.last: dict[str, Any] = {}
        self.up_since: dict[str, float] = {}
        self.apiserver_pid = State(self.layout).running("kube-apiserver")
        # More `bridge:` settings for the second bridge (pod_state_patches.py: its metrics).
        self.bridge_settings: dict[str, Any] = {}

    # ---------------------------------------------------------------- commands
    def slurm_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SKB_", "SLURM_"))}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def slurm(self, *argv: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                list(argv),
                env=self.slurm_env(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(list(argv), 124, "", "timed out")

    def scontrol_update(self, names: list[str], state: str, tries: int = 10) -> bool:
        """``scontrol update nodename=... state=...``, retried while slurmctld restarts."""
        for _ in range(tries):
            done = self.slurm(
                "/usr/bin/scontrol", "update", f"nodename={','.join(names)}", f"state={state}"
            )
            if done.returncode == 0:
                return True
            if "Unable to contact" in done.stderr or done.returncode == 124:
                time.sleep(1)
                continue
            # Slurm refused a transition for some node (e.g. power_up while powering down).
            with self.lock:
                self.counts.scontrol_refused += 1
            return False
        return False

    def kubectl(
        self, *argv: str, input_text: str | None = None, timeout: float = 60, check: bool = True
    ) -> str:
        cmd = [
            str(self.layout.kubernetes_bin / "kubectl"),
            f"--kubeconfig={self.layout.kubeconfig}",
            *argv,
        ]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, input=input_text, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as e:
            if check:
                raise RuntimeError(f"kubectl {' '.join(argv)} timed out") from e
            return ""
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    # ---------------------------------------------------------------- processes
    def _save_pids(self) -> None:
        self.pids_file.write_text(json.dumps(self.procs))

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.procs[name] = (proc.pid, proc_start(proc.pid) or "")
        self._save_pids()
        return proc.pid

    def running(self, name: str) -> int | None:
        entry = self.procs.get(name)
        if entry is None:
            return None
        pid, start = entry
        if proc_start(pid) != start:
            return None
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                return None
        return pid

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        pid = self.running(name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, sig)
            deadline = time.monotonic() + timeout
            while self.running(name) is not None and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.running(name) is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                time.sleep(0.3)
                self.running(name)
        self.procs.pop(name, None)
        self._save_pids()

    def wait_until(self, what: str, probe: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if probe():
                    return
            time.sleep(0.3)
        raise RuntimeError(f"{what}: not within {timeout:.0f}s (logs: {self.logs})")

    def start_slurmctld(self) -> None:
        self.start(
            "slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", str(self.conf)], self.slurm_env()
        )
        self.wait_until(
            "chaos slurmctld answering",
            lambda: "UP" in self.slurm("/usr/bin/scontrol", "ping").stdout,
            60,
        )

    def start_bridge(self) -> None:
        log = self.logs / "bridge.log"
        offset = log.stat().st_size if log.exists() else 0
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SKB_", "SLURM_"))}
        env.pop("KUBECONFIG", None)
        env["SLURM_CONF"] = str(self.conf)
        self.start(
            "bridge",
            [
                str(ROOT / ".venv" / "bin" / "slurm-k8s-bridge"),
                "serve",
                "--config",
                str(self.bridge_yaml),
            ],
            env,
        )

        def serving() -> bool:
            with log.open("rb") as f:
                f.seek(offset)
                return b"bridge serving on" in f.read()

        self.wait_until("chaos bridge serving", serving, 60)

    # ---------------------------------------------------------------- set-up
    def write_hosts(self) -> None:
        lines = self._hosts_without_ours()
        block = [HOSTS_BEGIN, *(f"127.0.0.1 {n}" for n in self.kwok_nodes + self.real_nodes)]
        HOSTS_FILE.write_text("\n".join([*lines, *block, HOSTS_END]) + "\n")

    @staticmethod
    def _hosts_without_ours() -> list[str]:
        lines, skipping = [], False
        for line in HOSTS_FILE.read_text().splitlines():
            if line == HOSTS_BEGIN:
                skipping = True
            elif line == HOSTS_END:
                skipping = False
            elif not skipping:
                lines.append(line)
        return lines

    def remove_hosts(self) -> None:
        if HOSTS_BEGIN in HOSTS_FILE.read_text():
            HOSTS_FILE.write_text("\n".join(self._hosts_without_ours()) + "\n")

    def clean_stale(self) -> None:
        """A previous run killed before its clean-up: stop its processes, drop its objects."""
        if self.pids_file.exists():
            with contextlib.suppress(ValueError):
                self.procs = {
                    k: (v[0], v[1]) for k, v in json.loads(self.pids_file.read_text()).items()
                }
            for name in list(self.procs):
                say(f"stopping a previous run's {name} (pid {self.procs[name][0]})")
                self.stop(name, signal.SIGKILL, timeout=5)
        if self.kubectl("get", "namespace", NAMESPACE, check=False).strip():
            say(f"deleting a previous run's namespace {NAMESPACE}")
            self.kubectl("delete", "namespace", NAMESPACE, "--wait=true", timeout=180)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.remove_hosts()

    def kube_objects(self) -> None:
        labels = {"app.kubernetes.io/part-of": "slurm-k8s-bridge-chaos"}
        meta = {"namespace": NAMESPACE, "labels": labels}
        key = self.layout.munge_key.read_bytes()
        objects: list[dict[str, Any]] = [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                # The ground's admission guard (deploy/kustomize/namespace) checks the bridge's
                # pods in every namespace against that namespace's allow-lists: without them it
                # refused every pod here, and the storm ran on nodes that were only set DOWN.
                "metadata": {"name": NAMESPACE, "annotations": allow_list_annotations()},
            },
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": SERVICE_ACCOUNT, **meta},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": SERVICE_ACCOUNT, **meta},
                "rules": [
                    # As deploy/kustomize/base/rbac.yaml: the state label and the registered
                    # condition are patches (pods, pods/status).
                    {
                        "apiGroups": [""],
                        "resources": ["pods"],
                        "verbs": ["get", "list", "watch", "create", "delete", "patch"],
                    },
                    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
                    {
                        "apiGroups": ["", "events.k8s.io"],
                        "resources": ["events"],
                        "verbs": ["create", "patch", "list"],
                    },
                    # Gang scheduling's PodGroups, where the API server serves them.
                    {
                        "apiGroups": ["scheduling.k8s.io"],
                        "resources": ["podgroups"],
                        "verbs": ["create", "get", "list", "patch", "delete"],
                    },
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": SERVICE_ACCOUNT, **meta},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": SERVICE_ACCOUNT,
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
                ],
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "slurm-nodes", **meta},
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": {"app.kubernetes.io/managed-by": "slurm-k8s-bridge"},
                    "ports": [{"name": "slurmd", "port": 6818, "targetPort": 6818}],
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "slurm-munge-key", **meta},
                "data": {"munge.key": base64.b64encode(key).decode()},
            },
        ]
        self.kubectl(
            "apply",
            "-f",
            "-",
            input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )
        token = self.kubectl(
            "-n", NAMESPACE, "create", "token", SERVICE_ACCOUNT, "--duration=6h"
        ).strip()
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "pg",
                            "cluster": {
                                "certificate-authority": str(self.layout.pki / "ca.crt"),
                                "server": f"https://127.0.0.1:{APISERVER_PORT}",
                            },
                        }
                    ],
                    "users": [{"name": "chaos", "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": "chaos",
                            "context": {"cluster": "pg", "user": "chaos", "namespace": NAMESPACE},
                        }
                    ],
                    "current-context": "chaos",
                }
            )
        )
        self.kubeconfig.chmod(0o600)

    def write_configs(self) -> None:
        real_template = {
            "spec": {
                "nodeSelector": {"slurm-k8s-bridge.io/node-kind": "real"},
                "containers": [
                    {
                        "name": "slurmd",
                        "imagePullPolicy": "Never",
                        "env": [{"name": "MUNGE_SOCKET", "value": MUNGE_SOCKET}],
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "64Mi"},
                            "limits": {"memory": "512Mi"},
                        },
                    }
                ],
            }
        }
        kwok_template = {
            "spec": {
                "nodeSelector": {"type": "kwok"},
                "tolerations": [
                    {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "containers": [
                    {"name": "slurmd", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
                ],
            }
        }
        # This cluster's slurmctld is the host's (22.05) whatever series the ground runs, and a
        # slurmd may not be newer than its slurmctld: the real nodes run that series' build.
        image = images.slurmd_series_reference(HOST_SERIES)
        config = {
            "cluster_name": CLUSTER,
            "kubernetes": {"namespace": NAMESPACE, "kubeconfig": str(self.kubeconfig)},
            "slurm": {
                "conf_server": f"{HOST_IP}:{PORT}",
                "bin_dir": "/usr/bin",
                "conf": str(self.conf),
                "command_timeout_s": 10,
                "munge_key_secret": "slurm-munge-key",
            },
            "bridge": {
                "socket": str(self.socket),
                "socket_mode": 0o660,
                "reconcile_interval_s": RECONCILE_S,
                "pod_age_guard_s": POD_AGE_GUARD_S,
                "failed_node_hold_s": FAILED_NODE_HOLD_S,
                "create_concurrency": 16,
                "log_format": "text",
                **self.bridge_settings,
            },
            "pools": [
                {
                    "name": "chaos",
                    "nodes": f"chaos-[0-{self.pool_size - 1}]",
                    "cpus": 8,
                    "real_memory_mb": 8192,
                    "partition": "chaos",
                    "image": image,
                    "schedule_timeout_s": 60,
                    "pod_template": kwok_template,
                },
                {
                    "name": "chaosreal",
                    "nodes": REAL_NODES,
                    "cpus": 2,
                    "real_memory_mb": 1024,
                    "partition": "chaosreal",
                    "image": image,
                    "schedule_timeout_s": 60,
                    "pod_template": real_template,
                },
            ],
        }
        self.bridge_yaml.write_text(json.dumps(config, indent=2))  # JSON is YAML
        loaded = load_config(str(self.bridge_yaml))
        site = [
            *controller_lines(
                "# Written by dev/bench/chaos.py; removed when it ends.",
                cluster=CLUSTER,
                port=PORT,
                state_dir=self.dir,
                log_dir=self.logs,
                slurmd_timeout=60,
            ),
            "",
        ]
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            "\n".join(site)
            + render_slurm_conf(
                loaded.pools,
                resume_program=str(self.hooks / "resume"),
                suspend_program=str(self.hooks / "suspend"),
                resume_fail_program=str(self.hooks / "resume_fail"),
                default_partition="chaos",
                source="dev/bench/chaos.py",
                # This slurm.conf is written whole, every run: the list globals go in too.
                write_list_globals=True,
                # The proving ground's own render options (Slurm 22.05), with our timers.
                **{
                    **render_options(HOST_SERIES),
                    "suspend_time": 30,
                    "suspend_timeout": SUSPEND_TIMEOUT,
                    "resume_timeout": self.resume_timeout,
                },
            )
        )
        # The hooks as slurmctld runs them: symlinks to slurm_plugins/, with a hooks.env next to
        # the symlinks naming the chaos bridge's socket (hook.sh reads that one first).
        self.hooks.mkdir(parents=True, exist_ok=True)
        for name in ("resume", "suspend", "resume_fail"):
            (self.hooks / name).symlink_to(ROOT / "slurm_plugins" / name)
        (self.hooks / "hooks.env").write_text(
            f"SKB_PYTHON={ROOT / '.venv' / 'bin' / 'python'}\n"
            f"SKB_SOCKET=unix:{self.socket}\n"
            "SKB_SLURM_BIN=/usr/bin\n"
            f"SKB_HOOK_LOG={self.logs / 'hooks.log'}\n"
        )

    def setup(self) -> None:
        if not ground.healthy(self.layout):
            say("the proving ground is not (fully) up: starting it")
            ground.up(self.layout)
            self.apiserver_pid = State(self.layout).running("kube-apiserver")
        self.clean_stale()
        self.logs.mkdir(parents=True, exist_ok=True)
        self.write_hosts()
        self.kube_objects()
        ctr = ["ctr", "--address", str(self.layout.containerd_socket)]
        images.import_series_image(self.layout, ctr, HOST_SERIES)
        self.write_configs()
        self.start_slurmctld()
        self.start_bridge()
        say(
            f"chaos cluster up: slurmctld :{PORT} (pid {self.running('slurmctld')}), bridge pid "
            f"{self.running('bridge')}, namespace {NAMESPACE}, chaos-[0-{self.pool_size - 1}] "
            f"on kwok + {REAL_NODES} on the real node, ResumeTimeout={self.resume_timeout}s"
        )

    # ---------------------------------------------------------------- observation
    def nodes(self) -> dict[str, dict[str, Any]] | None:
        done = self.slurm("/usr/bin/sinfo", "--json", timeout=10)
        if done.returncode != 0:
            return None
        try:
            return {n["name"]: n for n in json.loads(done.stdout)["nodes"]}
        except (ValueError, KeyError):
            return None

    def pods(self) -> list[dict[str, Any]] | None:
        """Our pods, or None when the API server did not answer.

        kubectl prints an empty List on stdout even when the request failed (exit 1): only a
        successful call is a list of pods.
        """
        try:
            out = self.kubectl(
                "-n", NAMESPACE, "get", "pods", "-o", "json", "--request-timeout=5s", timeout=10
            )
            items: list[dict[str, Any]] = json.loads(out)["items"]
        except (RuntimeError, ValueError, KeyError):
            return None
        return items

    def running_jobs(self) -> dict[str, str] | None:
        """node → job id of RUNNING jobs."""
        done = self.slurm("/usr/bin/squeue", "-h", "-t", "R", "-o", "%i|%N", timeout=10)
        if done.returncode != 0:
            return None
        jobs: dict[str, str] = {}
        for line in done.stdout.splitlines():
            job, _, hostlist = line.partition("|")
            if hostlist.strip():
                for name in expand(hostlist.strip()):
                    jobs[name] = job.strip()
        return jobs

    @staticmethod
    def flags(entry: dict[str, Any]) -> set[str]:
        return {str(f).upper() for f in entry.get("state_flags") or []}

    @staticmethod
    def pod_node(pod: dict[str, Any]) -> str:
        labels = pod["metadata"].get("labels") or {}
        return str(labels.get("slurm-k8s-bridge.io/node") or pod["metadata"]["name"])

    def allocated(self, nodes: dict[str, Any], jobs: dict[str, str], name: str) -> str | None:
        entry = nodes.get(name)
        if entry is None or name not in jobs:
            return None
        if str(entry.get("state")).lower() not in ("allocated", "mixed"):
            return None
        if self.flags(entry) & {"POWERING_UP", "POWERING_DOWN", "POWERED_DOWN", "COMPLETING"}:
            return None
        return jobs[name]

    def monitor(self) -> None:
        """Every ~2 s: POWERING_UP durations, and real nodes' pods vanishing while allocated."""
        prev: dict[str, tuple[str, str]] = {}  # node → (job, pod uid) at the last poll
        while not self.monitor_stop.wait(POLL_S):
            try:
                prev = self.poll(prev)
            except Exception as e:  # a bad read must not end the watch
                say(f"monitor: poll failed ({e!r}); next poll retries")

    def poll(self, prev_alloc: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
        """One look; returns the allocated real nodes with their pod UIDs."""
        now = time.monotonic()
        nodes = self.nodes()
        if nodes is None:
            return prev_alloc
        self.check_powering_up(nodes, now)
        jobs = self.running_jobs()
        pods = self.pods()
        if jobs is None or pods is None:
            return prev_alloc
        self.counts.peak_pods = max(self.counts.peak_pods, len(pods))
        live: dict[str, str] = {}
        for pod in pods:
            self.counts.pods_seen.add(pod["metadata"]["uid"])
            if not pod["metadata"].get("deletionTimestamp"):
                live[self.pod_node(pod)] = pod["metadata"]["uid"]
        after = self.nodes()  # Slurm read again after the pods: still allocated?
        jobs_after = self.running_jobs()
        current: dict[str, tuple[str, str]] = {}
        for name in self.real_nodes:
            job = self.allocated(nodes, jobs, name)
            if job is None:
                continue
            self.counts.real_jobs_ran.add(job)
            if name in live:
                current[name] = (job, live[name])
            before = prev_alloc.get(name)
            if (
                before is not None
                and before[0] == job
                and live.get(name) != before[1]
                and after is not None
                and jobs_after is not None
                and self.allocated(after, jobs_after, name) == job
                and not self.releasing.is_set()
            ):
                what = (
                    f"{name}: pod {before[1][:8]} of job {job} "
                    f"{'gone' if name not in live else 'replaced'} while allocated "
                    f"at {time.strftime('%H:%M:%S')}"
                )
                with self.lock:
                    self.counts.wrongly_deleted.append(what)
                say(f"WRONGLY DELETED: {what}")
        return current

    def check_powering_up(self, nodes: dict[str, Any], now: float) -> None:
        powering_up = sum("POWERING_UP" in self.flags(e) for e in nodes.values())
        self.counts.peak_powering_up = max(self.counts.peak_powering_up, powering_up)
        for name, entry in nodes.items():
            if "POWERING_UP" in self.flags(entry):
                first = self.up_since.setdefault(name, now)
                if now - first > self.resume_timeout + 2 * POLL_S:
                    self.note_stuck(name, f"POWERING_UP for {now - first:.0f}s")
            else:
                self.up_since.pop(name, None)
            if "ResumeTimeout reached" in str(entry.get("reason") or ""):
                self.note_stuck(name, "Slurm: ResumeTimeout reached")

    def note_stuck(self, name: str, why: str) -> None:
        with self.lock:
            if name not in self.counts.stuck:
                self.counts.stuck.add(name)
                say(f"STUCK: {name}: {why}")

    # ---------------------------------------------------------------- faults
    def fault(self, kind: str) -> None:
        seconds = self.args.fault_seconds
        with self.lock:
            self.counts.faults[kind] += 1
        if kind == "bridge_sigkill":
            pid = self.running("bridge")
            say(f"  fault: SIGKILL bridge (pid {pid})")
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                self.wait_until("bridge dead", lambda: self.running("bridge") is None, 10)
            time.sleep(self.rng.uniform(0, 3))
            self.start_bridge()
            say(f"  fault over: bridge restarted (pid {self.running('bridge')})")
        elif kind in ("bridge_sigstop", "apiserver_sigstop"):
            pid = self.running("bridge") if kind == "bridge_sigstop" else self.apiserver_pid
            what = "bridge" if kind == "bridge_sigstop" else "kube-apiserver"
            if pid is None:
                raise RuntimeError(f"{what} is not running")
            say(f"  fault: SIGSTOP {what} (pid {pid}) for {seconds:g}s")
            with self.lock:
                self.stopped[pid] = what
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)
                with self.lock:
                    self.stopped.pop(pid, None)
            say(f"  fault over: SIGCONT {what}")
        elif kind == "slurmctld_restart":
            say("  fault: slurmctld restart (SIGTERM, start again)")
            self.stop("slurmctld")
            time.sleep(self.rng.uniform(0, 2))
            self.start_slurmctld()
            say(f"  fault over: slurmctld back (pid {self.running('slurmctld')})")

    def fault_plan(self, kinds: list[str]) -> list[tuple[float, str]]:
        """(delay before, kind) per fault, spread at random over the storm window."""
        busy = sum(self.args.fault_seconds + 3 for _ in kinds)
        spare = max(0.0, self.window - busy)
        cuts = sorted(self.rng.uniform(0, spare) for _ in kinds)
        delays = [b - a for a, b in zip([0.0, *cuts], cuts, strict=False)]
        return list(zip(delays, kinds, strict=True))

    def run_faults(self, plan: list[tuple[float, str]], errors: list[BaseException]) -> None:
        try:
            for delay, kind in plan:
                time.sleep(delay)
                self.fault(kind)
        except BaseException as e:
            errors.append(e)

    # ---------------------------------------------------------------- storm
    def chunks(self, names: list[str]) -> list[list[str]]:
        names = list(names)
        self.rng.shuffle(names)
        out = []
        while names:
            size = self.rng.randint(1, max(1, len(names) // 4))
            out.append(names[:size])
            names = names[size:]
        return out

    def resume_down_nodes(self) -> None:
        nodes = self.nodes() or {}
        down = [n for n, e in nodes.items() if str(e.get("state")).lower() in ("down", "drained")]
        if down:
            self.scontrol_update(down, "resume")

    def round(self, number: int, kinds: list[str]) -> None:
        started = time.monotonic()
        self.resume_down_nodes()
        self.releasing.clear()
        chosen = self.rng.sample(self.kwok_nodes, self.args.nodes)
        jobs = []
        for _ in range(self.args.real_jobs):
            done = self.slurm(
                "/usr/bin/sbatch",
                "--parsable",
                "-p",
                "chaosreal",
                "-N1",
                "--exclusive",
                "--chdir=/tmp",
                "--output=/dev/null",
                "--job-name=chaos",
                "--wrap",
                "sleep 100000",
            )
            if done.returncode == 0:
                jobs.append(done.stdout.strip().split(";")[0])
        self.counts.real_jobs += len(jobs)
        plan = self.fault_plan(kinds)
        say(
            f"round {number}: {len(chosen)} kwok nodes, real jobs {jobs}, faults "
            + ", ".join(
                f"{k} at +{sum(d for d, _ in plan[: i + 1]):.0f}s" for i, (_, k) in enumerate(plan)
            )
        )
        errors: list[BaseException] = []
        faults = threading.Thread(target=self.run_faults, args=(plan, errors), daemon=True)
        faults.start()
        end = started + self.window
        # Up: random batches, as slurmctld sees jobs arrive.
        for batch in self.chunks(chosen):
            self.scontrol_update(batch, "power_up")
            time.sleep(self.rng.uniform(0, 0.4))
        # Flap random subsets until the window ends: suspend, then resume again.
        while time.monotonic() < end - 5:
            subset = self.rng.sample(chosen, max(1, len(chosen) // 5))
            self.scontrol_update(subset, "power_down_force")
            time.sleep(self.rng.uniform(1, 6))
            self.scontrol_update(subset, "power_up")
            time.sleep(min(self.rng.uniform(1, 6), max(0.0, end - time.monotonic())))
        # Down: release the real jobs, then power everything down in random batches.
        self.releasing.set()
        if jobs:
            self.slurm("/usr/bin/scancel", *jobs)
        time.sleep(1)
        for batch in self.chunks(chosen + self.real_nodes):
            self.scontrol_update(batch, "power_down_force")
            time.sleep(self.rng.uniform(0, 0.3))
        say(f"round {number}: storm done at +{time.monotonic() - started:.0f}s; waiting for faults")
        faults.join()
        if errors:
            raise RuntimeError(f"fault injection failed: {errors[0]!r}") from errors[0]
        self.settle(number)
        say(f"round {number}: done in {time.monotonic() - started:.0f}s")

    def settle(self, number: int) -> None:
        """Wait until every node is powered down without a pod, hold two passes, then count."""
        started = time.monotonic()
        deadline = started + self.args.settle_seconds
        converged_at: float | None = None
        nodes: dict[str, Any] | None = None
        pods: list[dict[str, Any]] | None = None
        while time.monotonic() < deadline:
            nodes, pods = self.nodes(), self.pods()
            if nodes is not None and pods is not None:
                quiet = not pods and all(
                    "POWERED_DOWN" in self.flags(e)
                    and not self.flags(e) & {"POWERING_UP", "POWERING_DOWN"}
                    for e in nodes.values()
                )
                if quiet and converged_at is None:
                    converged_at = time.monotonic()
                elif not quiet:
                    converged_at = None
                if converged_at and time.monotonic() - converged_at >= 2 * RECONCILE_S:
                    break
            time.sleep(POLL_S)
        if converged_at is None:
            self.counts.unsettled_rounds += 1
        while nodes is None or pods is None:
            time.sleep(POLL_S)
            nodes, pods = self.nodes(), self.pods()
        self.count_snapshot(nodes, pods)
        say(
            f"round {number}: settled in {time.monotonic() - started:.0f}s"
            + ("" if converged_at else " (NOT converged: counting what is left)")
        )

    def count_snapshot(self, nodes: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        by_node: dict[str, list[str]] = defaultdict(list)
        for pod in pods:
            by_node[self.pod_node(pod)].append(pod["metadata"]["name"])
        for name, names in by_node.items():
            entry = nodes.get(name)
            flags = self.flags(entry) if entry else set()
            if len(names) > 1:
                self.counts.duplicates.append(f"{name}: {names}")
            state = str(entry.get("state")).lower() if entry else ""
            up = bool(entry) and state != "down" and not flags & {"POWERED_DOWN", "POWERING_DOWN"}
            if entry is None or not ("POWERING_UP" in flags or up):
                shown = f"{state}+{'+'.join(sorted(flags))}" if entry else "unknown"
                self.counts.orphans.append(f"{name} ({shown})")
        for name, entry in nodes.items():
            if str(entry.get("state")).lower() == "down":
                reason = str(entry.get("reason") or "").strip()
                if reason:
                    self.counts.down_with_reason[reason_kind(reason)] += 1
                else:
                    self.counts.down_no_reason.append(name)

    # ---------------------------------------------------------------- clean-up
    def cleanup(self, keep_logs: bool) -> None:
        with self.lock:
            for pid, what in list(self.stopped.items()):
                say(f"SIGCONT {what} (pid {pid})")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self.stopped.clear()
        if self.running("slurmctld"):
            self.slurm("/usr/bin/scancel", "-u", "root")
        self.stop("bridge", timeout=15)
        with contextlib.suppress(Exception):
            self.kubectl(
                "delete", "namespace", NAMESPACE, "--wait=true", "--ignore-not-found", timeout=240
            )
        self.stop("slurmctld")
        self.remove_hosts()
        if keep_logs and self.logs.exists():
            kept = self.layout.local / "chaos-logs"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(self.logs, kept)
            say(f"logs kept in {kept}")
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---------------------------------------------------------------- the run
    def schedule(self) -> list[list[str]]:
        """Fault kinds per round: every kind as evenly as the rounds allow, in random order."""
        total = self.args.rounds * self.args.faults_per_round
        kinds: list[str] = []
        while len(kinds) < total:
            batch = list(FAULT_KINDS)
            self.rng.shuffle(batch)
            kinds += batch
        per = self.args.faults_per_round
        return [kinds[i * per : (i + 1) * per] for i in range(self.args.rounds)]

    def table(self, wall: float) -> str:
        c = self.counts
        faults = ", ".join(f"{k} {c.faults[k]}" for k in FAULT_KINDS)
        down_reasons = ", ".join(f"{k} {v}" for k, v in c.down_with_reason.most_common()) or "-"
        rows = [
            ("rounds", str(self.args.rounds)),
            ("kwok nodes per round", f"{self.args.nodes} (of chaos-[0-{self.pool_size - 1}])"),
            ("faults injected", f"{sum(c.faults.values())}: {faults}"),
            ("fault duration", f"{self.args.fault_seconds:g}s (SIGSTOPs); seed {self.args.seed}"),
            ("orphan pods", str(len(c.orphans))),
            ("duplicate pods", str(len(c.duplicates))),
            (f"POWERING_UP past ResumeTimeout ({self.resume_timeout}s)", str(len(c.stuck))),
            ("nodes DOWN without a reason", str(len(c.down_no_reason))),
            ("pods wrongly deleted while allocated", str(len(c.wrongly_deleted))),
            (
                "  allocated nodes checked",
                f"{REAL_NODES} (real slurmd): {len(c.real_jobs_ran)} of {c.real_jobs} jobs ran "
                "during faults; kwok nodes are never allocated",
            ),
            ("  DOWN with a reason after settle", down_reasons),
            (
                "  pods seen (distinct UIDs; peak at once)",
                f"{len(c.pods_seen)}; {c.peak_pods} (peak POWERING_UP {c.peak_powering_up})",
            ),
            ("  scontrol transitions refused", str(c.scontrol_refused)),
            ("  rounds not converged in settle", str(c.unsettled_rounds)),
            ("wall time", f"{wall:.0f}s"),
        ]
        width = max(len(k) for k, _ in rows)
        lines = ["", "chaos: results", "-" * (width + 40)]
        lines += [f"{k:<{width}}  {v}" for k, v in rows]
        for label, items in (
            ("orphan", c.orphans),
            ("duplicate", c.duplicates),
            ("stuck", sorted(c.stuck)),
            ("down-no-reason", c.down_no_reason),
            ("wrongly-deleted", c.wrongly_deleted),
        ):
            for item in items[:20]:
                lines.append(f"  {label}: {item}")
        return "\n".join(lines)

    def failed(self) -> bool:
        c = self.counts
        # A storm that never saw a pod proves nothing (seen: every pod refused by admission).
        no_pods = not c.pods_seen
        return bool(
            c.orphans or c.duplicates or c.stuck or c.down_no_reason or c.wrongly_deleted or no_pods
        )


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module's description as written, and every option's default."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dev/bench/chaos.py",
        description=__doc__,
        epilog=(
            "Needs the proving ground (started when absent) and root. Holds kube-apiserver "
            "stopped for --fault-seconds: run it alone (flock /tmp/skb-ground.lock). "
            "Example: dev/bench/chaos.py --rounds 3 --nodes 200 --fault-seconds 60 --seed 7"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=3, help="storm rounds")
    parser.add_argument("--nodes", type=int, default=200, help="kwok nodes stormed per round")
    parser.add_argument(
        "--fault-seconds", type=float, default=60, help="how long a SIGSTOP fault lasts"
    )
    parser.add_argument("--faults-per-round", type=int, default=2, help="faults per round")
    parser.add_argument("--seed", type=int, default=1, help="random seed (the plan is printed)")
    parser.add_argument(
        "--storm-seconds", type=float, default=30, help="minimum storm window per round"
    )
    parser.add_argument(
        "--settle-seconds", type=float, default=180, help="longest wait for the cluster to settle"
    )
    parser.add_argument(
        "--real-jobs", type=int, default=2, help=f"jobs per round on {REAL_NODES} (real slurmd)"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the logs even when clean")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.rounds < 1 or args.faults_per_round < 0:
        parser.error("--nodes and --rounds must be >= 1, --faults-per-round >= 0")
    if args.real_jobs > len(expand(REAL_NODES)):
        parser.error(f"--real-jobs: at most {len(expand(REAL_NODES))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("chaos: run as root (it starts slurmctld and edits /etc/hosts)", file=sys.stderr)
        return 2

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    harness = Harness(args)
    started = time.monotonic()
    rc = 2
    monitor = threading.Thread(target=harness.monitor, daemon=True)
    try:
        harness.setup()
        monitor.start()
        for number, kinds in enumerate(harness.schedule(), 1):
            harness.round(number, kinds)
        harness.monitor_stop.set()
        monitor.join(timeout=30)
        print(harness.table(time.monotonic() - started), flush=True)
        rc = 1 if harness.failed() else 0
    except BaseException as e:
        say(f"harness failed: {e!r}")
        if not isinstance(e, Exception | KeyboardInterrupt):
            raise
    finally:
        harness.monitor_stop.set()
        harness.cleanup(keep_logs=rc != 0 or args.keep_logs)
    say(f"exit {rc} after {time.monotonic() - started:.0f}s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
