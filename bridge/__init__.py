"""slurm-k8s-bridge: Slurm power saving backed by Kubernetes pods running slurmd."""

from __future__ import annotations

__version__ = "0.1.0"
