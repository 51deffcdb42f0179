"""The documents people read, built once for every surface: a pod's ranked decision, a node's devices, the
queues' numbers, a PodGroup, the rows of the web pages.

The HTTP diagnostics (transport/diagnostics_routes.py), the web view (transport/views.py), `dra-extender explain`
(cli.py) and `kubectl dra-quota` (kubectl_plugin/) all take their reports from here and only encode them (JSON,
HTML, a terminal table): a person sees one vocabulary whether they ask a live extender, an offline snapshot or
the plugin. Built from values the service hands over (a Ranking, a QuotaView, a ClusterSnapshot, a GangStatus);
nothing here decides or keeps anything, and nothing here knows HTTP.
"""
