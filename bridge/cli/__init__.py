"""The command line: ``slurm-k8s-bridge`` (:mod:`.main`) and its subcommands; ``serve`` hands
over to :mod:`bridge.runtime`."""
