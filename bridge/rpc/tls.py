"""The PEM files of mutual TLS, read the same way by the server and the client."""

from __future__ import annotations

from typing import NamedTuple

from bridge.errors import ConfigError


class TlsFiles(NamedTuple):
    """PEM files for mutual TLS: our certificate and key, and the CA that signed the peer."""

    cert: str
    key: str
    ca: str


def read_tls_files(tls: TlsFiles) -> tuple[bytes, bytes, bytes]:
    """Read the three PEM files (cert, key, ca); an unreadable file is a :class:`ConfigError`."""
    try:
        with open(tls.cert, "rb") as c, open(tls.key, "rb") as k, open(tls.ca, "rb") as a:
            return c.read(), k.read(), a.read()
    except OSError as e:
        raise ConfigError(f"cannot read TLS file: {e}") from e
