#!/bin/sh
# Copy config/*.yaml into manifests/config/ (kustomize loads nothing outside manifests/) and regenerate the
# bind component's copies. Run after editing config/; tests/test_manifests.py fails until the copies agree.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/../config/extender.yaml" "$here/../config/kube-scheduler-config.yaml" "$here/config/"
"$here/components/bind/sync-configs.sh"
