"""Logs: one JSON object per line for everything `dra-extender serve` prints (gunicorn's lines included), each line
of a request with its request id; `--log-format text` for people; an address in use is one error line and exit
code 1, before anything is served."""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from gunicorn.config import Config

from extender.transport import logs
from extender.transport.logs import GunicornLogger, JsonFormatter, configure_logging
from testkit.control_plane import free_port

BIN = Path(sys.executable).parent / "dra-extender"


@pytest.fixture
def root_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """configure_logging("json") writing to a buffer; the process's logging put back afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, sys.excepthook, threading.excepthook)
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buffer)
    configure_logging("json", "INFO")
    try:
        yield buffer
    finally:
        root.handlers[:], root.level, sys.excepthook, threading.excepthook = saved
        logging.captureWarnings(False)
        for name in ("gunicorn.error", "gunicorn.access"):
            logging.getLogger(name).handlers.clear()


def lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_lines_of_a_request_carry_its_id() -> None:
    record = logging.makeLogRecord({"name": "extender", "levelname": "INFO", "msg": "answered %s", "args": ("x",)})
    formatter = JsonFormatter()
    assert "requestId" not in json.loads(formatter.format(record))
    logs.begin_request()
    try:
        own = json.loads(formatter.format(record))["requestId"]
        logs.name_request("from-the-client")
        assert json.loads(formatter.format(record))["requestId"] == "from-the-client"
    finally:
        logs.end_request()
    logs.begin_request()
    try:
        assert json.loads(formatter.format(record))["requestId"] != own  # one id per request
    finally:
        logs.end_request()
    assert "requestId" not in json.loads(formatter.format(record))


def test_gunicorn_warnings_and_thread_crashes_are_json(root_logging: io.StringIO) -> None:
    config = Config()
    config.set("errorlog", "-")
    config.set("loglevel", "info")
    gunicorn_log = GunicornLogger(config)
    gunicorn_log.info("Listening at: %s", "http://127.0.0.1:1")
    gunicorn_log.error("Connection in use: %s", ("127.0.0.1", 1))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)
    thread = threading.Thread(target=lambda: 1 / 0, name="doomed")
    thread.start()
    thread.join()
    written = lines(root_logging)
    assert [(w["logger"], w["level"], w["msg"]) for w in written[:2]] == [
        ("gunicorn.error", "info", "Listening at: http://127.0.0.1:1"),
        ("gunicorn.error", "error", "Connection in use: ('127.0.0.1', 1)"),
    ]
    assert written[2]["logger"] == "py.warnings" and "deprecated thing" in written[2]["msg"]
    assert written[3]["msg"] == "uncaught exception in thread doomed" and "ZeroDivisionError" in written[3]["exception"]


def serve(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(BIN), "serve", "--listen", f"127.0.0.1:{port}", *flags], stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2):
                return process, url, log_path
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError(log_path.read_text())


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=20)


@pytest.mark.slow
def test_everything_serve_prints_is_json_with_request_ids(tmp_path: Path) -> None:
    settings = tmp_path / "gunicorn.conf.py"
    settings.write_text('accesslog = "-"\nloglevel = "info"\n', encoding="utf-8")
    process, url, log_path = serve(tmp_path, "--gunicorn-config", str(settings))
    try:
        request = urllib.request.Request(f"{url}/healthz", headers={"X-Request-Id": "trace-42"})
        urllib.request.urlopen(request, timeout=5).read()
        urllib.request.urlopen(f"{url}/livez", timeout=5).read()
    finally:
        stop(process)
    written = [json.loads(line) for line in log_path.read_text().splitlines()]  # every line is JSON
    assert any("serving the embedded demo cluster" in w["msg"] for w in written[:3])
    gunicorn_lines = [w for w in written if w["logger"] == "gunicorn.error"]
    assert any(w["msg"].startswith("Listening at: ") for w in gunicorn_lines)
    assert any(w["msg"] == "Shutting down: Master" for w in gunicorn_lines)
    access = {w["path"]: w for w in written if w["logger"] == "gunicorn.access"}
    assert (access["/healthz"]["requestId"], access["/healthz"]["status"]) == ("trace-42", "200")
    assert access["/livez"]["requestId"] and access["/livez"]["requestId"] != "trace-42"


@pytest.mark.slow
def test_log_format_text_is_for_people(tmp_path: Path) -> None:
    process, _, log_path = serve(tmp_path, "--log-format", "text")
    stop(process)
    (serving,) = [line for line in log_path.read_text().splitlines() if "serving" in line]
    assert " INFO extender: serving the embedded demo cluster on 127.0.0.1:" in serving
    with pytest.raises(ValueError):
        json.loads(serving)


@pytest.mark.slow
def test_an_address_in_use_is_one_error_and_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(BIN), "serve", "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()  # no "serving ...", no gunicorn retries
    assert json.loads(line) | {"ts": ""} == {
        "ts": "",
        "level": "error",
        "logger": "extender",
        "msg": f"error: cannot listen on 127.0.0.1:{port}: Address already in use",
        "exitCode": 1,
    }
