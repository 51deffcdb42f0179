#!/bin/sh
# Copy config/*.yaml into manifests/config/ (kustomize loads nothing outside manifests/) and into the Helm chart's
# files/, and regenerate the bind component's copies. Run after editing config/; tests/test_manifests.py and
# tests/test_helm_chart.py fail until the copies agree.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/../config/extender.yaml" "$here/../config/kube-scheduler-config.yaml" "$here/config/"
cp "$here/../config/extender.yaml" "$here/../config/kube-scheduler-config.yaml" "$here/helm/dra-quota-scheduler/files/"
"$here/components/bind/sync-configs.sh"
