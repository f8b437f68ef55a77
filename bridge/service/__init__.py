"""The use cases (resume, suspend, reconcile: :mod:`.use_cases`), the collaborators carved out
of them, and their ports (what they need from Slurm and Kubernetes, as protocols)."""
