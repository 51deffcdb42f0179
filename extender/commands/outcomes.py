"""How a command ends: exit codes, the errors that end it with one line `error: ...`, and the words for a network
failure. Shared by `dra-extender` and `kubectl dra-quota`, whose exit codes are the same (docs/cli.md) so that a
script can tell a mistake in its input from a cluster that is down."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

log = logging.getLogger("extender")

EXIT_OK = 0
EXIT_FAILED = 1  # the command could not run (a listen address in use, an unexpected error)
EXIT_USAGE = 2  # the command line is wrong (argparse's own code)
EXIT_INPUT = 3  # a file or object given is missing, unreadable, not YAML, or not a valid object
EXIT_UNREACHABLE = 4  # the API server or the extender did not answer in time (refused, timed out, never ready)
EXIT_REFUSED = 5  # it answered no: an object that does not exist, an error status, credentials refused
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT
EXIT_STDOUT_CLOSED = 141  # stdout closed early (`| head`): 128 + SIGPIPE, as a command killed by SIGPIPE


class CommandError(Exception):
    """An error that ends a command with one line `error: ...` and its exit code."""

    exit_code = EXIT_FAILED


class UsageError(CommandError):
    exit_code = EXIT_USAGE


class InputError(CommandError):
    exit_code = EXIT_INPUT


class UnreachableError(CommandError):
    exit_code = EXIT_UNREACHABLE


class RefusedError(CommandError):
    exit_code = EXIT_REFUSED


class ArgumentParser(argparse.ArgumentParser):
    """argparse with its error as one `error: ...` line (exit code 2) instead of the usage and the message."""

    def error(self, message: str) -> Any:  # argparse's signature is NoReturn; mypy needs no more
        print(f"error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def one_shot_logging(level: int = logging.ERROR) -> None:
    """explain and the kubectl plugin log errors only, as text: the API client's retry warnings and the watches'
    progress are noise for a command that reports its own failure in one line. (snapshot keeps its warnings:
    an object left out of the snapshot, Kueue absent.)"""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def run_reporting_errors(command: Callable[[], int], *, json_logs: Callable[[], bool] | None = None) -> int:
    """Run a command; every error becomes one line `error: ...` on stderr and its exit code, never a traceback.
    `json_logs`: whether logging has been made JSON by then (`serve`), in which case the line is a log record."""
    try:
        with _stdout_closed_quietly():
            return command()
    except CommandError as error:
        return _report(str(error), error.exit_code, json_logs)
    except _StdoutClosedError:
        return EXIT_STDOUT_CLOSED
    except KeyboardInterrupt:
        return _report("interrupted", EXIT_INTERRUPTED, json_logs)
    except Exception as error:
        message, code = (str(error), EXIT_INPUT) if is_input_error(error) else describe_other(error)
        return _report(message, code, json_logs)


def _report(message: str, code: int, json_logs: Callable[[], bool] | None) -> int:
    text = " ".join(message.split())
    if json_logs is not None and json_logs():
        log.error("error: %s", text, extra={"exitCode": code})
    else:
        print(f"error: {text}", file=sys.stderr)
    return code


# The errors that say a file or object given is wrong (exit code 3): (module, class). Looked up among the modules
# already loaded, so that a command that fails early (a missing file) has not imported the service to say so: an
# error of a class whose module is not loaded cannot have been raised.
INPUT_ERRORS = (
    ("extender.service.config", "ConfigError"),
    ("extender.state.snapshot_file", "SnapshotError"),
    ("extender.state.errors", "ObjectError"),
    ("extender.kube.strict_objects", "StrictDecodingError"),
)


def is_input_error(error: Exception) -> bool:
    for module_name, class_name in INPUT_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(error, getattr(module, class_name)):
            return True
    return False


def describe_other(error: Exception) -> tuple[str, int]:
    """(message, exit code) for errors of the layers below that a command does not catch itself: the API
    client's configuration and answers, the network; anything else is a bug, reported as one line all the same."""
    from extender.kube.api import ApiConfigError, ApiError

    if isinstance(error, ApiConfigError):
        return str(error), EXIT_INPUT
    if isinstance(error, ApiError):
        return f"the API server answered {error.describe()}", EXIT_REFUSED
    if is_network_error(error):
        return f"cannot reach the API server: {network_reason(error)}", EXIT_UNREACHABLE
    if isinstance(error, OSError):
        return f"{getattr(error, 'filename', '') or ''}: {error.strerror or error}".lstrip(": "), EXIT_INPUT
    return f"unexpected {type(error).__name__}: {error}", EXIT_FAILED


class _StdoutClosedError(Exception):
    """stdout's reader went away (`| head`)."""


@contextmanager
def _stdout_closed_quietly() -> Iterator[None]:
    """A BrokenPipeError on stdout ends the command with EXIT_STDOUT_CLOSED and no message: the reader has what
    it wanted. stdout is pointed at /dev/null so that the interpreter's flush at exit does not fail again."""
    try:
        yield
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise _StdoutClosedError() from None


def is_network_error(error: BaseException) -> bool:
    import urllib3

    return isinstance(error, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)) or (
        isinstance(error, OSError) and not isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError))
    )


def network_reason(error: BaseException) -> str:
    """A network failure in a few words ("Connection refused", "connect timed out"), not urllib3's repr chain."""
    import urllib3

    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        return network_reason(error.reason)
    if isinstance(error, urllib3.exceptions.NewConnectionError):  # (a ConnectTimeoutError subclass in urllib3 2)
        reason = str(error).rpartition("Failed to establish a new connection: ")[2] or str(error)
        return reason.partition("] ")[2] if reason.startswith("[Errno") else reason
    if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
        return "connect timed out"
    if isinstance(error, urllib3.exceptions.ReadTimeoutError):
        return "read timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def answer_message(data: bytes) -> str:
    """The message of an error answer (the extender's {"error": ...} or a metav1.Status), else its text."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return " ".join(data[:500].decode("utf-8", "replace").split())
    if isinstance(document, dict):
        return str(document.get("message") or document.get("error") or document)
    return str(document)[:500]
