# gunicorn settings for `dra-extender serve --gunicorn-config config/gunicorn.conf.py`: these are the defaults
# (extender/transport/server.py GUNICORN_DEFAULTS; tests/service/test_service.py keeps the two equal).
# Change what you need.
# One worker, many threads: the cluster view, the selector caches and the quota reservation ledger must live
# in ONE process, or two workers would each admit pods against their own ledger and over-commit quota.
workers = 1
# gthread with bounds against slow and idle clients (read deadline, connections per listener: the extender
# config's `server` section). TLS comes from the extender config's `tls` section, not from gunicorn's certfile.
worker_class = "extender.transport.server.ExtenderWorker"
threads = 16
# kube-scheduler gives up after httpTimeout (5s by default); a stuck request must not pin a thread longer.
timeout = 30
graceful_timeout = 10
keepalive = 30
errorlog = "-"
# gunicorn's own lines through the extender's log handler: JSON like every other line (logging.format).
logger_class = "extender.transport.logs.GunicornLogger"
loglevel = "warning"
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 16380
