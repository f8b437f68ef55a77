"""Certificates for the proving ground's Kubernetes, made with the openssl CLI.

One CA signs the API server's serving certificate and a client certificate per component;
the service-account key pair signs tokens. Made once per `.local/` and reused by later `up`s.

The certificates carry the extensions a strict verifier wants (Python 3.13+ verifies with
VERIFY_X509_STRICT: a CA without keyUsage is refused, "CA cert does not include key usage
extension"), as kubeadm's do; a CA made before that is replaced, with everything it signed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .layout import HOST_IP, KUBERNETES_SERVICE_IP, REAL_NODE
from .processes import run

log = logging.getLogger(__name__)

#: What every certificate the CA issues carries besides its own extended key usage.
_LEAF_EXTENSIONS = (
    "basicConstraints=critical,CA:FALSE\n"
    "keyUsage=critical,digitalSignature,keyEncipherment\n"
    "subjectKeyIdentifier=hash\n"
    "authorityKeyIdentifier=keyid,issuer\n"
)

#: name → (common name, organisation); organisations map to RBAC groups.
CLIENTS = {
    "admin": ("kubernetes-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", ""),
    "kube-scheduler": ("system:kube-scheduler", ""),
    "kubelet": (f"system:node:{REAL_NODE}", "system:nodes"),
    "kwok": ("kwok-controller", "system:masters"),
    "kube-proxy": ("system:kube-proxy", ""),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}


def _subject(cn: str, org: str) -> str:
    return f"/CN={cn}" + (f"/O={org}" if org else "")


def issue(pki: Path, name: str, subject: str, extensions: str) -> None:
    key, csr, crt, ext = (pki / f"{name}{s}" for s in (".key", ".csr", ".crt", ".ext"))
    run(["openssl", "genrsa", "-out", str(key), "2048"])
    key.chmod(0o600)
    run(["openssl", "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)])
    ext.write_text(_LEAF_EXTENSIONS + extensions)
    run(
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(pki / "ca.crt"),
            "-CAkey",
            str(pki / "ca.key"),
            "-CAcreateserial",
            "-days",
            "365",
            "-sha256",
            "-extfile",
            str(ext),
            "-out",
            str(crt),
        ]
    )
    csr.unlink()
    ext.unlink()


def ensure_pki(pki: Path) -> None:
    """Create whatever certificate or key is missing under ``pki``."""
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    if ca_outdated(pki):
        log.warning(
            "the cluster CA in %s has no keyUsage (strict verifiers such as Python 3.13+ refuse "
            "it): making a new CA and reissuing every certificate it signed",
            pki,
        )
        for old in [*pki.glob("*.crt"), *pki.glob("*.key"), *pki.glob("*.srl")]:
            if not old.name.startswith("sa."):
                old.unlink()
    if not (pki / "ca.crt").exists():
        log.info("creating the cluster CA in %s", pki)
        run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "3650",
                "-keyout",
                str(pki / "ca.key"),
                "-out",
                str(pki / "ca.crt"),
                "-subj",
                "/CN=slurm-k8s-bridge-proving-ground-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
            ]
        )
    if not (pki / "apiserver.crt").exists():
        sans = ",".join(
            [
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
                "IP:127.0.0.1",
                f"IP:{HOST_IP}",
                f"IP:{KUBERNETES_SERVICE_IP}",
            ]
        )
        issue(
            pki,
            "apiserver",
            "/CN=kube-apiserver",
            f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n",
        )
    if not (pki / "kubelet-serving.crt").exists():
        issue(
            pki,
            "kubelet-serving",
            f"/CN={REAL_NODE}",
            f"subjectAltName=DNS:{REAL_NODE},IP:{HOST_IP},IP:127.0.0.1\n"
            "extendedKeyUsage=serverAuth\n",
        )
    for name, (cn, org) in CLIENTS.items():
        if not (pki / f"{name}.crt").exists():
            issue(pki, name, _subject(cn, org), "extendedKeyUsage=clientAuth\n")
    if not (pki / "sa.key").exists():
        run(["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"])
        run(["openssl", "rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")])


def ca_outdated(pki: Path) -> bool:
    """Whether ``pki`` holds a CA made before the CA carried keyUsage (replaced by
    :func:`ensure_pki`)."""
    return (pki / "ca.crt").exists() and not _has_key_usage(pki / "ca.crt")


def _has_key_usage(certificate: Path) -> bool:
    shown = run(["openssl", "x509", "-in", str(certificate), "-noout", "-ext", "keyUsage"])
    return "Certificate Sign" in shown.stdout


def kubeconfig(pki: Path, client: str, server: str) -> str:
    """A kubeconfig for ``client`` that points at ``server`` with file references into ``pki``."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: proving-ground
  cluster:
    certificate-authority: {pki / "ca.crt"}
    server: {server}
users:
- name: {client}
  user:
    client-certificate: {pki / f"{client}.crt"}
    client-key: {pki / f"{client}.key"}
contexts:
- name: {client}@proving-ground
  context:
    cluster: proving-ground
    user: {client}
current-context: {client}@proving-ground
"""
