"""Everything the suite and the benchmarks build from Go modules, under one roof.

- ``go``: the toolchain (where ``go`` is, the environment every build runs with, the versions a go.mod pins);
- ``kubernetes``: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and Kueue's controller manager
  for the end-to-end tests, into ``tests/e2e/.build/`` (``python -m testkit.builds.kubernetes``);
- ``tools``: helm, kustomize and promtool, into ``tools/.build/`` (``python -m testkit.builds.tools``, make tools);
- ``oracle``: the upstream structured allocator as a Go program, into ``tests/oracle/.build/``.

The go.mod files that pin the versions stay beside the code that uses the binaries (tests/e2e/harness,
tests/e2e/kueue, tools/, tools/promtool, tests/oracle), and every build is reused while its output is there.
Each build is done on first use by the tests that need it, and ahead of time by ``make deps`` (tools/deps.sh).
The container image is built by image/build.sh (``make image``).
"""
