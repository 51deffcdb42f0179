#!/usr/bin/env bash
# What the whole suite needs from the system, installed when missing, then the builds it runs against.
# `make test` runs this first (through `make deps`); CI runs nothing else. Idempotent: when everything is there
# it only checks and prints how long each step took.
#
# A package that cannot be installed here (no root, no apt-get, the install failed) is named with the command
# that installs it: with CI=true that fails the run; elsewhere the tests that need it skip with that message,
# and pytest's summary at the end of `make test` lists each skip with its reason.
set -uo pipefail
cd "$(dirname "$0")/.."

ci="${CI:-}"
failed=()
step_start=0
step() { step_start=$(date +%s); }
took() { echo "deps: $1 took $(($(date +%s) - step_start)) s"; }

# command -> Debian package, for everything the tests call by name
declare -A package_of=(
  [openssl]=openssl            # the TLS tests make a CA
  [chromium]=chromium          # the web view's browser tests (no browser download: Debian's build)
  [chromedriver]=chromium-driver
  [podman]=podman              # the image: built with buildah, base by mmdebstrap, run under runc
  [buildah]=buildah
  [mmdebstrap]=mmdebstrap
  [runc]=runc
)
order=(openssl chromium chromedriver podman buildah mmdebstrap runc)

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="$PATH:/usr/local/go/bin"
fi

missing=()
for tool in "${order[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${package_of[$tool]}")
done
command -v go >/dev/null 2>&1 || missing+=(golang-go)  # the e2e control plane, Kueue, the upstream oracles, helm
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)

step
if [ "${#missing[@]}" -eq 0 ]; then
  echo "deps: system packages all present"
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing ${missing[*]}"
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
    took "installing ${missing[*]}"
  else
    failed+=("${missing[@]}")
  fi
else
  failed+=("${missing[@]}")
fi
for package in ${failed[@]+"${failed[@]}"}; do
  echo "deps: MISSING $package: install it with 'sudo apt-get install $package'; the tests that need it skip" >&2
done
if [ "${#failed[@]}" -gt 0 ] && [ "$ci" = "true" ]; then
  echo "deps: CI=true and ${failed[*]} could not be installed" >&2
  exit 1
fi

# The Python environment (the Makefile's venv, the same stamp `make install` keeps).
step
make --no-print-directory install
took "python environment (make install)"

build_failed=0
# The image the image test runs, with the test's own podman settings (never installed globally).
if command -v podman >/dev/null 2>&1; then
  step
  if CONTAINERS_CONF="$PWD/tests/image/containers.conf" IMAGE=localhost/dra-quota-extender:test image/build.sh; then
    took "the image (image/build.sh)"
  else
    echo "deps: the image build failed" >&2
    build_failed=1
  fi
fi

if command -v go >/dev/null 2>&1; then
  step
  if make --no-print-directory tools; then took "helm, kustomize, promtool (make tools)"; else build_failed=1; fi
  step
  if .venv/bin/python -m testkit.builds.kubernetes >/dev/null; then
    took "the control plane and Kueue (testkit/builds/kubernetes.py)"
  else
    echo "deps: building the control plane or Kueue failed" >&2
    build_failed=1
  fi
fi

if [ "$build_failed" -ne 0 ] && [ "$ci" = "true" ]; then
  exit 1
fi
exit 0
