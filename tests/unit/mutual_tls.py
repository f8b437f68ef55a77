"""A throwaway PKI for the mutual-TLS tests of the server and the hook clients, made by openssl."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)  # fmt: skip


def _make_cert(d: Path, name: str, ca: str, san: str) -> None:
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", f"{name}.pem",
             cwd=d)  # fmt: skip


def write_pki(d: Path) -> None:
    """``NAME.pem`` and ``NAME.key`` in ``d``: CAs ``ca`` and ``otherca``; ``server``
    (127.0.0.1, localhost), ``client`` (DNS slurmctld), ``mailer`` (email slurmctld) and
    ``workload`` (URI spiffe://hpc.example/slurmctld) signed by ``ca``; ``rogue`` by
    ``otherca``."""
    _make_ca(d, "ca")
    _make_ca(d, "otherca")
    _make_cert(d, "server", "ca", "IP:127.0.0.1,DNS:localhost")
    _make_cert(d, "client", "ca", "DNS:slurmctld")
    _make_cert(d, "mailer", "ca", "email:slurmctld")
    _make_cert(d, "workload", "ca", "URI:spiffe://hpc.example/slurmctld")
    _make_cert(d, "rogue", "otherca", "DNS:rogue")
