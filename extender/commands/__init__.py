"""What the two command-line tools share: `dra-extender` (cli.py) and `kubectl dra-quota` (kubectl_plugin/).

- assembly.py: the one composition root, `build_service(SourceSpec, config)`: a cluster source (a live API server,
  a snapshot file, the embedded demo) and the SchedulingService over it, with what `serve` adds (a journal, the
  scheduler's Lease, the requeue class);
- outcomes.py: exit codes, the errors that end a command with one line, and the wording of network failures;
- pod_file.py: the pod file a person gives and the objects beside it;
- diagnostics_client.py: the client of a running extender's diagnostics API.

Above transport (which they never import) and below the two tools; the kubectl plugin reaches everything it
computes locally through here.
"""
