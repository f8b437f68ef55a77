"""The local proving ground: a real Slurm and a real Kubernetes on this machine, offline.

``python -m proving_ground up|down|status`` (the Makefile runs it with ``PYTHONPATH=dev``).
Kubernetes binaries and images are built once into a cache directory; state, logs and PIDs live
under the repository's ``.local/``.
"""
