"""One candidate of the leader election, run as its own process by test_leader_election.py: the
bridge's Leadership and LeaseGateway against the real API server with the bridge's
credentials, and a writer that asks the fence before every write (an Event, through the fenced
pod port) ten times a second.

Prints one line per happening, each with CLOCK_BOOTTIME (the same clock in every process of a
host): ``lead T``, ``stop T``, ``write T`` (the fence admitted a write asked at T), ``refused
T``.

    python -m tests.integration.lease_candidate KUBECONFIG NAMESPACE LEASE IDENTITY DURATION RETRY
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from bridge.adapters.kubernetes import PodGateway
from bridge.errors import NotLeader
from bridge.runtime.fencing import FencedPods
from bridge.runtime.leadership import Leadership, boot_clock


def say(what: str) -> None:
    print(f"{what} {boot_clock():.3f}", flush=True)


def main(argv: list[str]) -> int:
    kubeconfig, namespace, lease, identity, duration, retry = argv
    pods = PodGateway.connect(
        kubeconfig=kubeconfig, context=None, namespace=namespace, cluster_name="lease-test"
    )
    leadership = Leadership(
        pods.lease(lease),
        identity,
        duration_s=int(duration),
        retry_s=float(retry),
        on_started=lambda: say("lead"),
        on_stopped=lambda: say("stop"),
    )
    fenced = FencedPods(pods, leadership.check)
    stop = threading.Event()
    # SIGINT (the test's clean stop) ends the loop between two writes, as the bridge's own
    # SIGTERM does. Not KeyboardInterrupt, raised wherever the main thread happens to be (inside
    # a print, an Event write, a lock): twice in CI a candidate stopped that way printed no
    # "stop" and released nothing, and the other led only at the Lease's expiry.
    signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    leadership.start()
    sequence = 0
    try:
        while not stop.wait(0.1):
            # The time is taken before the fence looks: a write it admits was admitted no later.
            asked = boot_clock()
            try:
                leadership.check("write")
            except NotLeader:
                print(f"refused {asked:.3f}", flush=True)
                continue
            print(f"write {asked:.3f}", flush=True)
            sequence += 1
            fenced.record_event("lease-probe", "LeaseProbe", f"{identity} write {sequence}")
    finally:
        leadership.stop(release=True)
        pods.close()
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
