"""`dra-extender` and `kubectl dra-quota` on ordinary mistakes: one line `error: ...` on stderr, nothing on stdout,
no traceback, and the exit code docs/cli.md documents (2 usage, 3 input, 4 unreachable, 5 refused, 141 stdout
closed); an unreachable API server is an error within seconds, not a wait."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from extender import cli, kubectl_plugin
from extender.commands.outcomes import EXIT_INPUT, EXIT_REFUSED, EXIT_STDOUT_CLOSED, EXIT_UNREACHABLE, EXIT_USAGE
from testkit.control_plane import free_port
from tests.support.paths import ROOT

BIN = Path(sys.executable).parent
DEMO = ROOT / "extender" / "demo" / "cluster.yaml"
DEMO_POD = ROOT / "extender" / "demo" / "pod-two-gpus.yaml"
BAD_YAML = "kind: Pod\nmetadata: {name: p\n  bad: [\n"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_plugin(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = kubectl_plugin.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    """The one line of stderr, which must be an `error: ...` line (no traceback, no usage text)."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def down_kubeconfig(tmp_path: Path, server: str = "") -> Path:
    """A kubeconfig whose API server address refuses connections (or is `server`)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "down", "cluster": {"server": server or f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "down", "context": {"cluster": "down", "user": "u", "namespace": "team-a"}}],
        "current-context": "down",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_explain_input_mistakes_are_one_line_and_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run_cli(capsys, "explain", str(tmp_path / "absent.yaml"))
    assert (code, out) == (EXIT_INPUT, "")
    assert one_error_line(err) == f"error: {tmp_path / 'absent.yaml'}: No such file or directory"
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML, encoding="utf-8")
    code, out, err = run_cli(capsys, "explain", str(bad))
    assert (code, out) == (EXIT_INPUT, "")
    assert one_error_line(err) == f"error: {bad}: not YAML: line 3, column 6: expected ',' or '}}', but got ':'"
    code, out, err = run_cli(capsys, "explain", str(tmp_path))
    assert (code, out) == (EXIT_INPUT, "") and "Is a directory" in one_error_line(err)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "explain", str(DEMO_POD), "--snapshot", str(empty))
    assert (code, out) == (EXIT_INPUT, "")
    assert one_error_line(err).startswith(f"error: snapshot {empty} holds no Node and no ClusterQueue")


def test_a_missing_kubeconfig_is_named_in_one_wording(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The CLI and the plugin say the same thing about a kubeconfig that is not there: its path, and that it
    does not exist (not the client's "Invalid kube-config file", not a Python errno repr)."""
    missing = tmp_path / "nonexistent"
    expected = f"error: cannot use kubeconfig {missing}: No such file or directory"
    for run, argv in (
        (run_cli, ["explain", str(DEMO_POD), "--kubeconfig", str(missing)]),
        (run_cli, ["snapshot", "--kubeconfig", str(missing)]),
        (run_plugin, ["--kubeconfig", str(missing), "queues"]),
        (run_plugin, ["--kubeconfig", str(missing), "--local", "explain", "-n", "team-a", "trainer-0"]),
        (run_plugin, ["--kubeconfig", str(missing), "podgroup", "train"]),
    ):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (EXIT_INPUT, ""), argv
        assert one_error_line(err) == expected, argv


def test_usage_mistakes_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        cli.main(["explain", str(DEMO_POD), "-o", "wide"])
    assert usage.value.code == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: argument -o/--output: invalid choice: 'wide'")
    assert line.endswith("(see 'dra-extender explain --help')")
    with pytest.raises(SystemExit) as usage:
        kubectl_plugin.main(["--snapshot", str(DEMO), "explain", "--bogus"])
    assert usage.value.code == EXIT_USAGE and "unrecognized arguments: --bogus" in one_error_line(
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (cli.main, ["explain", str(DEMO_POD), "--server", "{server}"]),
        (kubectl_plugin.main, ["--server", "{server}", "queues"]),
        (kubectl_plugin.main, ["explain", "-f", str(DEMO_POD), "--server", "{server}"]),
    ],
)
def test_a_server_without_its_scheme_is_a_usage_mistake(
    capsys: pytest.CaptureFixture[str], main: object, argv: list[str]
) -> None:
    """`--server 127.0.0.1:8888`: exit 2 and what to write, not "cannot reach ...: unknown url type"."""
    assert callable(main)
    with pytest.raises(SystemExit) as usage:
        main([arg.format(server="127.0.0.1:8888") for arg in argv])
    assert usage.value.code == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(
        "error: argument --server: '127.0.0.1:8888' is not a URL: write http://127.0.0.1:8888 (or https://127.0.0.1:8888)"
    ), line
    with pytest.raises(SystemExit) as usage:
        main([arg.format(server="ftp://127.0.0.1") for arg in argv])
    assert usage.value.code == EXIT_USAGE
    assert "'ftp://127.0.0.1' is not an http:// or https:// URL" in one_error_line(capsys.readouterr().err)


def test_an_api_server_that_is_down_is_exit_4_within_seconds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = down_kubeconfig(tmp_path)
    for argv in (
        ["snapshot", "--kubeconfig", str(config)],
        ["explain", str(DEMO_POD), "--kubeconfig", str(config)],
    ):
        started = time.monotonic()
        code, out, err = run_cli(capsys, *argv)
        assert (code, out) == (EXIT_UNREACHABLE, ""), err
        assert one_error_line(err).startswith("error: cannot reach the API server at http://127.0.0.1:")
        assert "Connection refused" in err
        assert time.monotonic() - started < 10, argv  # no wait for a view that cannot become ready


def test_explain_against_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "explain", str(DEMO_POD), "--server", f"http://127.0.0.1:{free_port()}")
    assert (code, out) == (EXIT_UNREACHABLE, "") and "Connection refused" in one_error_line(err)
    with refusing_server() as url:
        code, out, err = run_cli(capsys, "explain", str(DEMO_POD), "--server", url)
    assert (code, out) == (EXIT_REFUSED, "")
    assert one_error_line(err) == f"error: {url}/diagnostics/explain: HTTP 400: request body must be a Pod object"


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"error": "request body must be a Pod object"}'
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class refusing_server:  # noqa: N801 - used as a context manager, named like one
    """An HTTP server answering every POST with 400 and the extender's error JSON."""

    def __enter__(self) -> str:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_plugin_explain_file_mistakes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML, encoding="utf-8")
    code, out, err = run_plugin(capsys, "--snapshot", str(DEMO), "explain", "-f", str(bad))
    assert (code, out) == (EXIT_INPUT, "") and one_error_line(err).startswith(f"error: {bad}: not YAML: line 3")
    code, out, err = run_plugin(capsys, "--snapshot", str(DEMO), "explain", "-f", str(tmp_path / "absent"))
    assert (code, out) == (EXIT_INPUT, "")
    assert one_error_line(err) == f"error: {tmp_path / 'absent'}: No such file or directory"
    code, out, err = run_plugin(capsys, "--kubeconfig", str(down_kubeconfig(tmp_path)), "explain", "-f", str(bad))
    assert code == EXIT_INPUT  # the file is read before any cluster is asked
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n", encoding="utf-8")
    for argv in (["queues"], ["explain", "-f", str(DEMO_POD)], ["podgroup", "-n", "team-a", "train"]):
        code, out, err = run_plugin(capsys, "--snapshot", str(empty), *argv)
        assert (code, out) == (EXIT_INPUT, ""), argv
        assert one_error_line(err) == (
            f"error: snapshot {empty} holds no Node and no ClusterQueue: nothing to decide against "
            "(`dra-extender snapshot --kubeconfig FILE` writes one of a live cluster)"
        )


def test_plugin_explains_a_named_pod_offline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`--snapshot FILE explain -n NS POD` reads the pod from the snapshot: no kubeconfig anywhere."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    code, out, err = run_plugin(capsys, "--snapshot", str(DEMO), "explain", "-n", "team-a", "trainer-0")
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith("Pod team-a/trainer-0  ")
    _, as_json, _ = run_plugin(capsys, "--snapshot", str(DEMO), "explain", "-n", "team-a", "trainer-0", "-o", "json")
    pod = next(
        d for d in yaml.safe_load_all(DEMO.read_text(encoding="utf-8")) if d and d["metadata"]["name"] == "trainer-0"
    )
    manifest = tmp_path / "trainer-0.yaml"
    manifest.write_text(yaml.safe_dump(pod), encoding="utf-8")
    _, from_file, _ = run_plugin(capsys, "--snapshot", str(DEMO), "explain", "-f", str(manifest), "-o", "json")
    assert yaml.safe_load(as_json) == yaml.safe_load(from_file)
    code, out, err = run_plugin(capsys, "--snapshot", str(DEMO), "explain", "-n", "team-a", "nope")
    assert (code, out) == (EXIT_REFUSED, "") and one_error_line(err) == (
        'error: pods "nope" not found in namespace "team-a"'
    )
    # --server without a kubeconfig: the extender is asked, never an API server (none is configured)
    code, out, err = run_plugin(capsys, "--server", f"http://127.0.0.1:{free_port()}", "explain", "trainer-0")
    assert (code, out) == (EXIT_UNREACHABLE, "") and one_error_line(err).startswith("error: cannot reach http://")


@pytest.mark.slow
def test_a_closed_stdout_is_exit_141_without_a_traceback(tmp_path: Path) -> None:
    """`dra-extender explain ... | head`: the reader closes the pipe; no BrokenPipeError traceback."""
    for command in (
        [str(BIN / "dra-extender"), "explain", str(DEMO_POD), "-o", "json"],
        [str(BIN / "kubectl-dra_quota"), "--snapshot", str(DEMO), "queues", "-o", "json"],
    ):
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()  # before the command writes: every write fails with EPIPE
        err = process.stderr.read().decode()
        assert process.wait(timeout=60) == EXIT_STDOUT_CLOSED, err
        assert err == "", err


def test_help_texts_say_what_the_flags_do() -> None:
    parser = cli.build_parser()
    subcommands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("serve", "explain"):
        text = " ".join(subcommands[name].format_help().split())
        assert "--snapshot FILE the cluster as a snapshot file" in text, name
        assert "without a source flag: the embedded demo cluster" in text, name
        assert "--config FILE the extender's config file (YAML; every key and its default: config/extender.yaml)" in (
            text
        ), name
    assert "--log-format {json,text}" in subcommands["serve"].format_help()


@pytest.mark.slow
def test_an_api_server_that_never_answers_costs_one_timeout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A server that accepts connections and never answers: each command gives up after --request-timeout,
    once (no retries multiplying it)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the kernel's backlog; nobody reads them
        config = down_kubeconfig(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}")
        for run, argv in (
            (run_plugin, ["--kubeconfig", str(config), "--request-timeout", "2", "queues"]),
            (run_cli, ["snapshot", "--kubeconfig", str(config), "--request-timeout", "2"]),
            (run_cli, ["explain", str(DEMO_POD), "--kubeconfig", str(config), "--request-timeout", "2"]),
        ):
            started = time.monotonic()
            code, out, err = run(capsys, *argv)
            elapsed = time.monotonic() - started
            assert (code, out) == (EXIT_UNREACHABLE, ""), err
            assert "timed out" in one_error_line(err), err
            assert 2 <= elapsed < 6, (argv, elapsed)  # one timeout of 2 s; with retries, four
