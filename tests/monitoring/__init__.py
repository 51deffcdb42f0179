"""The alert rules' promtool unit tests and the helpers that read the monitoring files' expressions."""
