"""``python -m proving_ground {up,down,status,demo}``."""

from __future__ import annotations

import argparse
import logging
import sys

from .demo import run_demo
from .ground import down, status, up
from .layout import Layout
from .processes import ProvingGroundError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="proving_ground",
        description="A real Slurm (slurmctld 26.05 unless SLURM=22.05|24.11) and a real Kubernetes "
        "(etcd, kube-apiserver, controller-manager, scheduler of 1.37 unless K8S=1.34, a 1.34 "
        "kubelet with containerd, kwok nodes) on this machine, "
        "built offline and cached. State, logs and PIDs: .local/; binaries and images: "
        "~/.cache/slurm-k8s-bridge (SKB_CACHE_DIR).",
    )
    parser.add_argument(
        "command",
        choices=("up", "down", "status", "demo"),
        help="up: start (idempotent); down: stop what up started; status: show it; "
        "demo: up, then a small workload whose jobs scale slurmd pods up and down",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    layout = Layout.default()
    try:
        if args.command == "up":
            up(layout)
        elif args.command == "demo":
            return run_demo(layout)
        elif args.command == "down":
            down(layout)
        else:
            return status(layout)
    except ProvingGroundError as e:
        print(f"proving ground: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
