"""``KubeCredentials``: the bridge's Kubernetes token, re-read without a restart when its file
changes or the API server answers 401.

The client asks ``Configuration.refresh_api_key_hook`` for the token right before it puts the
``authorization`` header on a request (``Configuration.get_api_key_with_prefix``, kubernetes
37.0.2), and ``ApiClient`` keeps the Configuration it is given, not a copy. So one hook on the
Configuration behind the gateway's one ``ApiClient`` covers every call: pods, the watch, Events,
drains, ``doctor``'s reviews, and :mod:`.json_bytes` (which asks the client for its headers).

The files are the kubeconfig (each path of a ``:`` list), the ``tokenFile`` its user names, or,
in the cluster, the service-account token the kubelet rotates. Each request compares their
``(st_mtime_ns, st_size, st_ino)`` with the last load's: a stat per file, no read. A changed
file, or a 401 since the last load, makes the next request load them again into a scratch
Configuration, and only the token moves to the shared one: the server, CA and client certificate
went into the connection pool at start. A load that fails (a half-written file, bad YAML) keeps
the old token and logs a warning naming the file, once per change of the file.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from bridge.errors import BackendError, Unauthorized

log = logging.getLogger(__name__)

#: Where both loaders put the token (with its ``Bearer`` word) in ``Configuration.api_key``.
TOKEN_KEY = "BearerToken"  # noqa: S105 (a key's name)
#: A burst of 401s is one log line; a 401 this long after the burst's line starts a new one.
UNAUTHORIZED_LOG_EVERY_S = 60.0
#: What the loaders set besides the token. The connection pool took these at start, so a
#: reload only compares them (a change needs a restart).
CONNECTION_FIELDS = (
    "host",
    "ssl_ca_cert",
    "cert_file",
    "key_file",
    "verify_ssl",
    "tls_server_name",
    "proxy",
)
#: The client library's own refresh hook (an exec plugin's expiry check, the in-cluster loader's
#: minute) runs at most this often. It re-sets the server and certificates on the scratch
#: Configuration each time, and that setter reads every proxy variable of the environment: run
#: per request, it was half the client's CPU per pod create (issue 33). A token expiring is
#: seen a second late at most; a 401 in between loads again anyway.
LIBRARY_REFRESH_EVERY_S = 1.0
#: The helper that writes the bridge's kubeconfig, named in the 401 line.
MAKE_KUBECONFIG = "deploy/kustomize/overlays/external/make-kubeconfig.sh"


@dataclass(frozen=True)
class FileStamp:
    """Enough of a ``stat`` to see a file rewritten or replaced (-1s: it is missing)."""

    path: str
    mtime_ns: int
    size: int
    inode: int


def stamp(path: str) -> FileStamp:
    """The file's :class:`FileStamp` now (the target's, through a symlink: the kubelet swaps
    the service-account token's ``..data`` link)."""
    try:
        st = os.stat(path)
    except OSError:
        return FileStamp(path, -1, -1, -1)
    return FileStamp(path, st.st_mtime_ns, st.st_size, st.st_ino)


def _named(items: Any, name: Any, key: str) -> Any:
    """``items[i][key]`` of the first entry named ``name`` in a kubeconfig list, else None."""
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(key), dict):
            return item[key]
    return None


def token_file(paths: Sequence[str], context: str | None) -> str | None:
    """The ``tokenFile`` the context's user names (relative to the kubeconfig naming the user),
    merged the way kubectl merges a ``:`` list (the first file to set a name wins); None when
    the user holds its token inline or a file cannot be read (the load reports that)."""
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(doc, dict):
            docs.append((path, doc))
    current = context
    for _, doc in docs:
        current = current or doc.get("current-context")
    found = next((c for _, d in docs if (c := _named(d.get("contexts"), current, "context"))), None)
    user_name = found.get("user") if found else None
    for path, doc in docs:
        user = _named(doc.get("users"), user_name, "user")
        if user is None:
            continue
        name = user.get("tokenFile")
        if not isinstance(name, str) or not name:
            return None
        return os.path.join(os.path.dirname(os.path.abspath(os.path.expanduser(path))), name)
    return None


class KubeCredentials:
    """The token behind one ``Configuration``: :meth:`configure` loads it and installs this
    object as the Configuration's ``refresh_api_key_hook``; :meth:`rejected` hears of a 401.

    Thread-safe: the gateway's pool, the watch and the Event senders ask at once.
    """

    def __init__(
        self,
        kubeconfig: str | None,
        context: str | None = None,
        *,
        service_token: str = SERVICE_TOKEN_FILENAME,
        service_ca: str = SERVICE_CERT_FILENAME,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kubeconfig = kubeconfig or None
        self.context = context
        self._paths = tuple(p for p in (kubeconfig or "").split(os.pathsep) if p)
        self._service_token = service_token
        self._service_ca = service_ca
        self._environ = environ if environ is not None else os.environ
        self._clock = clock
        self._lock = threading.Lock()
        self._files: tuple[str, ...] = ()
        self._stamps: tuple[FileStamp, ...] = ()
        self._token_file: str | None = None
        #: The last good load; the loader's own hook (an exec plugin's expiry, the in-cluster
        #: loader's minute) keeps refreshing it.
        self._loaded: Any = None
        self._library_hook: Callable[[Any], None] | None = None
        self._library_refreshed_at: float | None = None  # None: at the next request
        self._connection: tuple[Any, ...] = ()
        #: A 401 came since the last load: load again even if no file changed.
        self._stale = False
        self._burst_logged_at: float | None = None
        self._unlogged_401s = 0

    # -- what the messages say -------------------------------------------------------------------

    @property
    def source(self) -> str:
        """Where the token comes from, as a log line names it."""
        if not self._paths:
            return f"the in-cluster service-account token {self._service_token}"
        if self._token_file:
            return f"token file {self._token_file} (named by kubeconfig {self.kubeconfig})"
        return f"kubeconfig {self.kubeconfig}"

    @property
    def fix(self) -> str:
        """What to do about a token the API server rejects."""
        if not self._paths:
            return (
                "the kubelet rotates it: check that the pod's ServiceAccount exists and its "
                "token is mounted; the bridge re-reads it"
            )
        if self._token_file:
            return (
                "rotate it: write `kubectl -n NAMESPACE create token SERVICE_ACCOUNT` to a "
                f"temporary file and mv it over {self._token_file}; the bridge re-reads it, no "
                "restart"
            )
        return (
            f"rotate it: {MAKE_KUBECONFIG} -n NAMESPACE -S SERVER {self.kubeconfig}; the bridge "
            "re-reads it, no restart"
        )

    # -- loading ---------------------------------------------------------------------------------

    def configure(self, configuration: Any) -> None:
        """Load the credentials into ``configuration`` and keep them fresh from then on.

        Raises :class:`BackendError` naming the file when they cannot be loaded."""
        with self._lock:
            try:
                loaded = self._load()
            except Exception as e:  # the loaders raise ConfigException, OSError, YAML errors...
                where = self.kubeconfig or "the in-cluster service account"
                raise BackendError(f"cannot load Kubernetes credentials from {where}: {e}") from e
            self._adopt(loaded)
            for name in CONNECTION_FIELDS:
                setattr(configuration, name, getattr(loaded, name))
            configuration.api_key_prefix = dict(loaded.api_key_prefix)
            token = loaded.api_key.get(TOKEN_KEY)
            if token is not None:
                configuration.api_key[TOKEN_KEY] = token
        # After the first token: the client calls the hook only when there is one to refresh.
        configuration.refresh_api_key_hook = self

    def __call__(self, configuration: Any) -> None:
        """The Configuration's ``refresh_api_key_hook``: before each request's headers, load
        again if a file changed or a 401 came since, then hand over the current token."""
        files = self._files
        stamps = tuple(stamp(path) for path in files)
        with self._lock:
            if self._stale or files != self._files or stamps != self._stamps:
                self._reload()
            self._refresh_loaded()
            token = self._loaded.api_key.get(TOKEN_KEY)
        if token is not None:
            configuration.api_key[TOKEN_KEY] = token  # one dict store: readers see old or new

    def rejected(self, error: Unauthorized) -> Unauthorized:
        """The API server answered 401: re-read at the next request even if no file changed,
        say so in a line per burst, and return ``error`` naming the token's file and the fix."""
        now = self._clock()
        with self._lock:
            self._stale = True
            self._unlogged_401s += 1
            due = (
                self._burst_logged_at is None
                or now - self._burst_logged_at >= UNAUTHORIZED_LOG_EVERY_S
            )
            count = self._unlogged_401s
            if due:
                self._burst_logged_at, self._unlogged_401s = now, 0
        if due:
            log.warning(
                "kubernetes: 401 Unauthorized (%d since the last such line): %s: the API server "
                "does not accept the token from %s (expired, revoked or of a deleted "
                "ServiceAccount); %s",
                count,
                error,
                self.source,
                self.fix,
            )
        return Unauthorized(f"{error}: the token from {self.source}; {self.fix}")

    # -- under the lock --------------------------------------------------------------------------

    def _watched(self) -> tuple[str, ...]:
        if not self._paths:
            return (self._service_token,)
        self._token_file = token_file(self._paths, self.context)
        return self._paths + ((self._token_file,) if self._token_file else ())

    def _load(self) -> Any:
        """A fresh Configuration from the files, stamped before they are read (a write after
        the stamp shows as a change at the next request)."""
        self._files = self._watched()
        self._stamps = tuple(stamp(path) for path in self._files)
        loaded = k8s.Configuration()
        if self._paths:
            k8s_config.load_kube_config(
                config_file=self.kubeconfig, context=self.context, client_configuration=loaded
            )
        else:
            InClusterConfigLoader(
                token_filename=self._service_token,
                cert_filename=self._service_ca,
                environ=self._environ,
            ).load_and_set(loaded)
        return loaded

    def _reload(self) -> None:
        self._stale = False
        try:
            loaded = self._load()
        except Exception as e:  # runs inside a request: a bad file must not fail it
            # The failed files' stamps are kept: no retry (or line) until one changes again.
            log.warning(
                "kubernetes: cannot re-read the credentials from %s, keeping the token loaded "
                "before: %s: %s",
                self.source,
                type(e).__name__,
                e,
            )
            return
        if loaded.api_key.get(TOKEN_KEY) is None:
            log.warning(
                "kubernetes: %s now holds no token, keeping the token loaded before", self.source
            )
            return
        self._adopt(loaded)

    def _adopt(self, loaded: Any) -> None:
        before = self._loaded
        self._loaded = loaded
        # The loader's hook re-sets the Configuration it is given, so it gets ours, never
        # the shared one (it would replace this hook there).
        self._library_hook = loaded.refresh_api_key_hook
        self._library_refreshed_at = None
        connection = tuple(getattr(loaded, name) for name in CONNECTION_FIELDS)
        if before is None:
            self._connection = connection
            return
        if connection != self._connection:
            self._connection = connection
            log.warning(
                "kubernetes: the server, CA or client certificate in %s changed; only the token "
                "is re-read: restart the bridge for the rest",
                self.source,
            )
        if loaded.api_key.get(TOKEN_KEY) != before.api_key.get(TOKEN_KEY):
            self._burst_logged_at = None  # the new token's first 401 is news
            log.info("kubernetes: re-read a new token from %s", self.source)
        else:
            log.debug("kubernetes: re-read %s, the token is unchanged", self.source)

    def _refresh_loaded(self) -> None:
        hook = self._library_hook
        if hook is None:
            return
        now = self._clock()
        last = self._library_refreshed_at
        if last is not None and now - last < LIBRARY_REFRESH_EVERY_S:
            return
        self._library_refreshed_at = now
        try:
            hook(self._loaded)
        except Exception as e:  # an exec plugin failing: the token we hold may still serve
            # Dropped until the next load, so a broken plugin is one line, not one per request;
            # a 401 loads again, which runs the plugin again.
            self._library_hook = None
            log.warning(
                "kubernetes: refreshing the token from %s failed, keeping the current one: %s: %s",
                self.source,
                type(e).__name__,
                e,
            )
