#!/bin/sh
# Regenerate this component's copies of config/*.yaml with the bind verb turned on.
# Run after editing config/extender.yaml or config/kube-scheduler-config.yaml; tests/deploy/test_manifests.py checks it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
config="$here/../../../config"
header() {
  echo "# Copy of config/$1 with the bind verb turned on, used by components/bind in place of the original."
  echo "# Regenerate with manifests/components/bind/sync-configs.sh; tests/deploy/test_manifests.py checks they agree."
}
{ header extender.yaml; sed -e 's/^  enabled: false$/  enabled: true/' "$config/extender.yaml"; } > "$here/extender.yaml"
{ header kube-scheduler-config.yaml; sed -e 's/^  # bindVerb: bind.*$/  bindVerb: bind/' "$config/kube-scheduler-config.yaml"; } \
  > "$here/kube-scheduler-config.yaml"
grep -q '^  enabled: true$' "$here/extender.yaml" || { echo "bind.enabled not found in config/extender.yaml" >&2; exit 1; }
grep -q '^  bindVerb: bind$' "$here/kube-scheduler-config.yaml" || { echo "bindVerb not found" >&2; exit 1; }
