"""Throw-away PKI for the gRPC tests (tests/rpc): a CA, server and client certificates made with
the ``openssl`` CLI.  The fake service those tests serve is `fake_scheduler.FakeService`."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from kai_ray.rpc.auth import TlsConfig


@dataclass(frozen=True)
class Pki:
    """PEM files of a test CA, a server certificate for 127.0.0.1/localhost and client certificates."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by ``ca``
    client_key: Path
    rogue_ca: Path  # an unrelated CA
    rogue_cert: Path  # a client certificate signed by ``rogue_ca``
    rogue_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}", "-days", "2",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


def _make_leaf(directory: Path, name: str, ca: str, extensions: str) -> None:
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip


def make_pki(directory: Path) -> Pki:
    """Create the CA and certificates with the ``openssl`` CLI (the ``cryptography`` package is
    not a dependency here)."""
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca(directory, "ca")
    _make_ca(directory, "rogue-ca")
    _make_leaf(
        directory, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _make_leaf(directory, "client", "ca", "extendedKeyUsage=clientAuth\n")
    _make_leaf(directory, "rogue", "rogue-ca", "extendedKeyUsage=clientAuth\n")
    return Pki(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        rogue_ca=directory / "rogue-ca.crt",
        rogue_cert=directory / "rogue.crt",
        rogue_key=directory / "rogue.key",
    )


def mutual_tls(pki: Pki) -> TlsConfig:
    """A server's TLS that requires a client certificate signed by ``pki.ca``."""
    return TlsConfig(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca)
