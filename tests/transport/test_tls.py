"""TLS with client certificates: only a kube-scheduler-style client with a certificate from our CA is served,
and diagnostics can live on a separate plain listener."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testkit.control_plane import free_port

BIN = Path(sys.executable).parent / "dra-extender"
pytestmark = [
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl command not installed"),
    pytest.mark.slow,  # generates certificates and starts `dra-extender serve` (gunicorn) with TLS
]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> None:
    """A CA, a server certificate for 127.0.0.1, two client certificates from the CA (CN client, and CN
    kube-scheduler with a DNS SAN) and one self-signed."""
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        cwd=directory,
    )
    for name, extension in (
        ("server", "subjectAltName=IP:127.0.0.1"),
        ("client", "extendedKeyUsage=clientAuth"),
        ("kube-scheduler", "extendedKeyUsage=clientAuth\nsubjectAltName=DNS:kube-scheduler.kube-system"),
    ):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=directory,
        )
        (directory / f"{name}.ext").write_text(extension + "\n")
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
            cwd=directory,
        )
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "rogue.key",
        "-out",
        "rogue.crt",
        "-days",
        "1",
        "-subj",
        "/CN=rogue",
        cwd=directory,
    )


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    make_pki(directory)
    port, diagnostics_port = free_port(), free_port()
    config = directory / "extender.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tls": {
                    "certFile": str(directory / "server.crt"),
                    "keyFile": str(directory / "server.key"),
                    "clientCAFile": str(directory / "ca.crt"),
                },
                "diagnostics": {"listen": f"127.0.0.1:{diagnostics_port}"},
            }
        )
    )
    log = (directory / "server.log").open("w")
    process = subprocess.Popen(
        [str(BIN), "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", diagnostics_port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        raise AssertionError((directory / "server.log").read_text())
    yield directory, port, diagnostics_port
    process.terminate()
    process.wait(timeout=10)


def client_context(directory: Path, cert: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    if cert:
        context.load_cert_chain(str(directory / f"{cert}.crt"), str(directory / f"{cert}.key"))
    return context


def filter_over_tls(port: int, context: ssl.SSLContext) -> int:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["gpu-od-1"]})
    connection.request("POST", "/filter", body, {"Content-Type": "application/json"})
    return connection.getresponse().status


def test_scheduler_with_client_certificate_is_served(tls_server):
    directory, port, _ = tls_server
    assert filter_over_tls(port, client_context(directory, "client")) == 200


@pytest.mark.parametrize("cert", [None, "rogue"])
def test_client_without_valid_certificate_is_refused(tls_server, cert):
    directory, port, _ = tls_server
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        filter_over_tls(port, client_context(directory, cert))


def test_diagnostics_on_separate_plain_listener(tls_server):
    directory, port, diagnostics_port = tls_server
    connection = http.client.HTTPConnection("127.0.0.1", diagnostics_port, timeout=5)
    connection.request("GET", "/metrics")
    assert connection.getresponse().status == 200
    connection = http.client.HTTPConnection("127.0.0.1", diagnostics_port, timeout=5)
    connection.request("POST", "/filter", "{}", {"Content-Type": "application/json"})
    assert connection.getresponse().status == 404  # scheduling verbs are not on the diagnostics listener
    secure = http.client.HTTPSConnection("127.0.0.1", port, context=client_context(directory, "client"), timeout=5)
    secure.request("GET", "/diagnostics/queues")
    assert secure.getresponse().status == 404  # and diagnostics are not on the scheduling listener


def test_livez_probes_the_tls_listener_from_the_diagnostics_one(tls_server):
    """The self-probe shows no client certificate: the handshake alert still proves a worker took it."""
    _, _, diagnostics_port = tls_server
    connection = http.client.HTTPConnection("127.0.0.1", diagnostics_port, timeout=10)
    connection.request("GET", "/livez")
    response = connection.getresponse()
    assert response.status == 200, response.read()


def served_serial(directory: Path, port: int) -> int:
    context = client_context(directory, "client")
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    return int(
        subprocess.run(
            ["openssl", "x509", "-inform", "DER", "-noout", "-serial"], input=der, capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
        .split("=")[1],
        16,
    )


def test_a_certificate_rotated_in_place_is_served_without_a_restart(tls_server):
    """cert-manager rewrites tls.crt/tls.key in place; the next handshake after the change uses the new pair."""
    directory, port, _ = tls_server
    before = served_serial(directory, port)
    rotated = directory / "rotated"
    rotated.mkdir()
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=server", cwd=rotated)  # fmt: skip
    openssl("x509", "-req", "-in", "server.csr", "-CA", "../ca.crt", "-CAkey", "../ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "1", "-extfile", "../server.ext", cwd=rotated)  # fmt: skip
    for name in ("server.key", "server.crt"):
        (rotated / name).replace(directory / name)
    deadline = time.monotonic() + 10
    after = before
    while after == before and time.monotonic() < deadline:
        time.sleep(0.5)
        after = served_serial(directory, port)
    assert after != before, "the rotated certificate was not picked up"
    assert filter_over_tls(port, client_context(directory, "client")) == 200


@pytest.fixture(scope="module")
def pinned_server(tmp_path_factory):
    """The verbs on every address (0.0.0.0), which serve allows only with client certificates pinned to
    kube-scheduler's identity (tls.clientNames)."""
    directory = tmp_path_factory.mktemp("pinned")
    make_pki(directory)
    port, diagnostics_port = free_port(), free_port()
    config = directory / "extender.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tls": {
                    "certFile": str(directory / "server.crt"),
                    "keyFile": str(directory / "server.key"),
                    "clientCAFile": str(directory / "ca.crt"),
                    "clientNames": ["kube-scheduler.kube-system"],
                },
                "diagnostics": {"listen": f"127.0.0.1:{diagnostics_port}"},
            }
        )
    )
    log = (directory / "server.log").open("w")
    process = subprocess.Popen(
        [str(BIN), "serve", "--config", str(config), "--listen", f"0.0.0.0:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", diagnostics_port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        raise AssertionError((directory / "server.log").read_text())
    yield directory, port
    process.terminate()
    process.wait(timeout=10)


def test_off_loopback_only_the_pinned_identity_calls_the_verbs(pinned_server):
    """Any certificate of the CA is not kube-scheduler's: only the one naming tls.clientNames (here a DNS SAN) is
    served; another of the same CA is answered 403 and closed, one of another CA fails the handshake."""
    directory, port = pinned_server
    assert filter_over_tls(port, client_context(directory, "kube-scheduler")) == 200
    try:
        status = filter_over_tls(port, client_context(directory, "client"))
    except (ConnectionError, OSError):  # the 403 raced with the request still being written
        status = 403
    assert status == 403
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        filter_over_tls(port, client_context(directory, "rogue"))
    assert "refused a client certificate naming client" in (directory / "server.log").read_text()
