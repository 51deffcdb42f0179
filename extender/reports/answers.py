"""The diagnostics API's own error answers, shared by the server that gives them (transport/error_answers.py) and
the clients that read them (commands/diagnostics_client.py, the kubectl plugin)."""

from __future__ import annotations

# The reason of a 404 for /diagnostics or /ui on a listener that does not serve them (the deployment's metrics
# listener on the pod IP): the kubectl plugin, reaching it through the Service proxy, computes locally instead.
DIAGNOSTICS_ELSEWHERE = "DiagnosticsNotServedHere"
DIAGNOSTICS_ELSEWHERE_MESSAGE = (
    "this listener does not serve /diagnostics (they are on the diagnostics listener, loopback in the deployment: "
    "kubectl port-forward)"
)
