"""`kubectl dra-quota`: the extender's explanations one kubectl away (console script ``kubectl-dra_quota``).

kubectl runs any ``kubectl-<name>`` executable on PATH as ``kubectl <name>`` (a dash in the command is an
underscore in the file name, krew's convention), passing the remaining arguments and the environment but none of
its own flags, so this plugin reads ``--kubeconfig`` / ``KUBECONFIG``, ``--context`` and ``-n`` itself, as kubectl
would (k8s.io/cli-runtime genericclioptions: the context's namespace, else ``default``).

::

    kubectl dra-quota explain [-n NS] POD     # rank every node for a pod of the cluster and say why
    kubectl dra-quota explain -f pod.yaml     # ... for a pod that is not created yet
    kubectl dra-quota queues                  # ClusterQueues: nominal, usage, reserved, available per flavor
    kubectl dra-quota node NODE               # a node's devices, free or held by whom
    kubectl dra-quota podgroup [-n NS] NAME   # a PodGroup's group verdict: need, hold, refusal, each member
    ... [-o table|json|yaml] [--context CTX] [--kubeconfig FILE]

Where the answer comes from, in this order:

1. ``--server URL``: a running extender's diagnostics listener (e.g. through ``kubectl port-forward``);
2. ``--snapshot FILE``: computed locally from a snapshot file (``dra-extender snapshot``, or the embedded demo's
   ``extender/demo/cluster.yaml``);
3. otherwise the cluster of the kubeconfig context: the in-cluster extender, reached through the API server's
   service proxy on its diagnostics Service (``kube-system/dra-quota-scheduler-metrics:9090`` as the manifests
   and the chart install it; ``--service`` to change), so the answer includes its in-flight quota reservations;
   when that Service is absent, has no ready endpoint, or reaches a listener without diagnostics (the default
   deployment keeps them on loopback: its port 9090 answers 404 with reason DIAGNOSTICS_ELSEWHERE), the answer
   is computed locally from a live read of the cluster (as ``dra-extender explain --kubeconfig`` does), with a
   note on stderr. ``--local`` skips the Service.

A named pod is read where the answer comes from: with ``--snapshot`` from the snapshot (no kubeconfig needed),
with ``--server`` from the API server when a kubeconfig is at hand, else the extender's last decision for it is
shown (``GET /diagnostics/pods/NS/NAME``). A manifest given with ``-f`` is decoded strictly (unknown fields are
refused with their path, as kube-apiserver refuses them).

Every error is one line ``error: ...`` on stderr with the exit codes of ``dra-extender`` (docs/cli.md): 2 bad
usage, 3 bad input (a file, a kubeconfig), 4 unreachable (API server, extender), 5 refused (not found, an error
status), 141 stdout closed.

The service and its exit codes come from ``extender.commands`` (the composition root ``dra-extender`` uses too),
the reports and the explanation's table from ``extender.reports``; the plugin never imports ``extender.transport``
(an import contract keeps it so). This package only adds kubectl's conventions, the API reads and the service
proxy:

* ``arguments``: the command line (kubectl's flags before or after the subcommand);
* ``kubeconfig``: which kubeconfig file and namespace, as kubectl resolves them;
* ``cluster``: requests to the API server of a kubeconfig context (through kube/api.py KubeApi);
* ``answer_source``, ``remote``, ``local``, ``fallback``: where the answer comes from (an extender's diagnostics
  API, through the Service proxy or ``--server``; a service computed in-process; the first with the second as
  fallback);
* ``rendering``, ``podgroup_rendering``: kubectl-style tables, JSON and YAML;
* ``command``: the entry point tying them together; ``plugin_errors``: nobody behind the Service.
"""

from extender.kubectl_plugin.command import main

__all__ = ["main"]
