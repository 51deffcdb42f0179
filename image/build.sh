#!/usr/bin/env bash
# Build the extender's image (Containerfile at the repository root) with podman, or buildah when podman is absent.
#
#   image/build.sh                         # or: make image
#
# Environment (all optional):
#   IMAGE       name:tag to build                 (default localhost/dra-quota-extender:<version in pyproject.toml>)
#   BASE        base image; when unset, the default base (python:3.12-slim) is used if it is already present
#               locally or can be pulled, else one is made from Debian's packages with mmdebstrap (below)
#   LOCAL_BASE  1: always use the mmdebstrap-made base; 0: never (fail when the default base cannot be pulled)
#   SUITE       Debian suite of the made base (default bookworm), APT_SOURCES its apt sources file
#               (default: the host's /etc/apt/sources.list.d/debian.sources when present, so the same mirrors,
#               updates and security suites are used as on the host)
#   BUILDER     podman or buildah (default: podman when installed)
#   RUNTIME     OCI runtime for the build's RUN steps (default: the builder's own, usually crun; runc when the
#               host's cgroups are in hybrid mode, v1 controllers with a v2 mount at /sys/fs/cgroup/unified,
#               which crun refuses with "cgroups in hybrid mode not supported")
#   PIP_CERT    CA bundle for pip inside the build (default: the host's /etc/ssl/certs/ca-certificates.crt when
#               present); it is bind-mounted read-only for the build, never copied into the image
# Prints how long each step took.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)
IMAGE=${IMAGE:-localhost/dra-quota-extender:${version}}
SUITE=${SUITE:-bookworm}
DEFAULT_BASE=python:3.12-slim
MADE_BASE=localhost/dra-quota-extender-base:${SUITE}
LOCAL_BASE=${LOCAL_BASE:-auto}

if [ -n "${BUILDER:-}" ]; then
  tool=$BUILDER
elif command -v podman >/dev/null 2>&1; then
  tool=podman
elif command -v buildah >/dev/null 2>&1; then
  tool=buildah
else
  echo "image/build.sh: neither podman nor buildah is installed (Debian: apt-get install podman)" >&2
  exit 1
fi

# crun supports cgroup v2 and pure v1, not the hybrid layout (systemd's default on some older hosts and VMs):
# /sys/fs/cgroup a tmpfs of v1 controllers with cgroup2 mounted at /sys/fs/cgroup/unified. runc runs there.
CGROUP_ROOT=${CGROUP_ROOT:-/sys/fs/cgroup}  # another root only for tests/deploy/test_image_build_script.py
hybrid_cgroups() { [ ! -e "$CGROUP_ROOT/cgroup.controllers" ] && [ -e "$CGROUP_ROOT/unified/cgroup.controllers" ]; }

if [ -z "${RUNTIME:-}" ] && hybrid_cgroups; then
  if ! command -v runc >/dev/null 2>&1; then
    echo "image/build.sh: this host's cgroups are in hybrid mode, which crun (podman's default runtime) does not" >&2
    echo "support; install runc (Debian: apt-get install runc; make deps installs it) or set RUNTIME" >&2
    exit 1
  fi
  RUNTIME=runc
  echo "image: cgroups in hybrid mode; building with runc"
fi
global_args=() runtime_args=()  # podman takes --runtime before the command, buildah after it
if [ -n "${RUNTIME:-}" ] && [ "$tool" = podman ]; then
  global_args=(--runtime "$RUNTIME")
elif [ -n "${RUNTIME:-}" ]; then
  runtime_args=(--runtime "$RUNTIME")
fi

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

have_image() { "$tool" image exists "$1" 2>/dev/null || "$tool" inspect --type image "$1" >/dev/null 2>&1; }

make_base() {
  # An essential-variant Debian with exactly what the Containerfile needs: python3 + venv, CA certificates and
  # libstdc++6. Rebuilt only when missing (remove it to refresh: $tool rmi $MADE_BASE).
  if have_image "$MADE_BASE"; then
    echo "image: base $MADE_BASE present"
    return
  fi
  command -v mmdebstrap >/dev/null 2>&1 || {
    echo "image/build.sh: no base image reachable and mmdebstrap is not installed (apt-get install mmdebstrap)" >&2
    exit 1
  }
  local sources=${APT_SOURCES:-}
  if [ -z "$sources" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sources=/etc/apt/sources.list.d/debian.sources
  fi
  local tmp start
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  start=$(now)
  # merged-/usr through mmdebstrap's hook rather than the usrmerge package (which would pull in perl, ~47 MB);
  # no manuals, translations or docs except the copyright files (~40 MB).
  mmdebstrap --quiet --variant=essential --include=python3,python3-venv,ca-certificates,libstdc++6 \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --format=tar "$SUITE" "$tmp/base.tar" ${sources:+"$sources"} >"$tmp/mmdebstrap.log" 2>&1 ||
    { cat "$tmp/mmdebstrap.log" >&2; echo "image/build.sh: mmdebstrap failed" >&2; exit 1; }
  echo "image: mmdebstrap $SUITE base in $(took "$start")s ($(du -m "$tmp/base.tar" | cut -f1) MB tar)"
  start=$(now)
  "$tool" import --quiet \
    --change 'CMD ["/bin/sh"]' \
    --change "LABEL org.opencontainers.image.description=Debian $SUITE essential + python3, made by mmdebstrap" \
    "$tmp/base.tar" "$MADE_BASE" >/dev/null
  echo "image: imported $MADE_BASE in $(took "$start")s"
}

if [ -z "${BASE:-}" ]; then
  case "$LOCAL_BASE" in
    1) make_base; BASE=$MADE_BASE ;;
    0) BASE=$DEFAULT_BASE ;;
    *)
      if have_image "$DEFAULT_BASE" || timeout 60 "$tool" pull --quiet "$DEFAULT_BASE" >/dev/null 2>&1; then
        BASE=$DEFAULT_BASE
      else
        echo "image: $DEFAULT_BASE cannot be pulled; making a base from Debian's packages instead"
        make_base
        BASE=$MADE_BASE
      fi
      ;;
  esac
fi

PIP_CERT=${PIP_CERT:-}
if [ -z "$PIP_CERT" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  PIP_CERT=/etc/ssl/certs/ca-certificates.crt
fi
cert_args=()
if [ -n "$PIP_CERT" ]; then
  cert_args=(--volume "$(readlink -f "$PIP_CERT"):/run/build-ca.crt:ro" --build-arg PIP_CERT=/run/build-ca.crt)
fi

start=$(now)
build=(build --quiet --pull=never --layers -f Containerfile -t "$IMAGE")
build+=(--build-arg BASE="$BASE" --build-arg VERSION="$version" "${cert_args[@]}" "${runtime_args[@]}")
if ! "$tool" "${global_args[@]}" "${build[@]}" . >/dev/null; then
  echo "image/build.sh: $tool build failed. If it says 'cgroups in hybrid mode not supported' (crun), set RUNTIME=runc;" >&2
  echo "if containers hit 'too many open files', try CONTAINERS_CONF=tests/image/containers.conf (runc, explicit" >&2
  echo "ulimits)." >&2
  exit 1
fi
size=$("$tool" image inspect --format '{{.Size}}' "$IMAGE")
echo "image: built $IMAGE (base $BASE) with $tool in $(took "$start")s, $((size / 1000000)) MB"
