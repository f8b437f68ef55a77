"""The serve process: the composition root (:mod:`.serve`), the reconcile loop, the pod watcher
and its cache, configuration reloads, the log format."""
