"""Slurm through its JSON command line: scontrol/sinfo/squeue as argv lists (:mod:`.cli`), their
output parsed by pure functions (:mod:`.parse`)."""
