"""Throwaway TLS material for tests: a CA and a server certificate for 127.0.0.1/localhost.

Made with the ``openssl`` command line (present wherever a JDK or Python is built), PEM
only, so that both Python's ``ssl`` module and Kafka's ``ssl.keystore.type=PEM`` read them.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aiostream_kafka.errors import BrokerUnavailableError


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """Paths of the generated files."""

    ca_cert: Path  #: the CA certificate clients trust
    server_cert: Path  #: the server certificate, signed by the CA
    server_key: Path  #: the server's private key (PKCS#8, unencrypted)
    server_keystore: Path  #: key + certificate chain in one PEM file (Kafka's PEM keystore)

    def client_context(self) -> ssl.SSLContext:
        """An ``SSLContext`` that trusts only the test CA and checks the host name."""
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        ctx.check_hostname = True
        return ctx

    def server_context(self) -> ssl.SSLContext:
        """An ``SSLContext`` for a test server presenting the server certificate."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.server_cert), str(self.server_key))
        return ctx


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise BrokerUnavailableError(
            "TLS tests need the `openssl` command; install it (e.g. `apt-get install openssl`)"
        )
    result = subprocess.run(
        [openssl, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise BrokerUnavailableError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def make_tls_material(directory: Path) -> TlsMaterial:
    """Create a CA and a server certificate valid for ``127.0.0.1`` and ``localhost`` in
    ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=aiostream-kafka test CA", "-keyout", "ca.key", "-out", "ca.pem",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", "server.key", "-out", "server.csr", cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth\n"
        "basicConstraints=CA:FALSE\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem",
        cwd=directory,
    )  # fmt: skip
    # Kafka's PEM keystore wants a PKCS#8 key followed by the certificate chain.
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", "server.key", "-out", "server.p8.key",
             cwd=directory)  # fmt: skip
    keystore = directory / "server-keystore.pem"
    keystore.write_text(
        (directory / "server.p8.key").read_text()
        + (directory / "server.pem").read_text()
        + (directory / "ca.pem").read_text()
    )
    return TlsMaterial(
        ca_cert=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.p8.key",
        server_keystore=keystore,
    )
