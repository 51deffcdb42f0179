"""Development-only helpers shared by the tests and the benchmarks: API-object builders, generated clusters
and the build of the upstream-allocator oracle.

Not shipped: pyproject's ``[tool.setuptools.packages.find]`` includes ``extender*`` only. Both ``tests/`` and
``bench/`` import from here, so that ``bench/`` never imports from ``tests/``.
"""
