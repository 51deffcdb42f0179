#!/bin/sh
# Copy config/*.yaml into manifests/config/ (kustomize loads nothing outside manifests/) and into the Helm chart's
# files/, and regenerate the bind component's copies. Run after editing config/; tests/deploy/test_manifests.py and
# tests/deploy/test_helm_chart.py fail until the copies agree.
#
# Also writes the one Kubernetes release into the deployment: the k8s.io/kubernetes version the e2e harness pins
# (tests/e2e/harness/go.mod, the kube-scheduler every e2e test runs and whose feature-gate defaults the extender's
# `features:` follow) becomes the kube-scheduler image tag of the kustomize base and the chart, and the chart's
# kubeVersion floor (kube-scheduler must not be newer than the API server), and into the pages that name it
# (manifests/README.md, README.md, docs/deploying.md). tests/deploy/test_kubernetes_release.py
# fails while any of them names another release.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/../config/extender.yaml" "$here/../config/kube-scheduler-config.yaml" "$here/config/"
cp "$here/../config/extender.yaml" "$here/../config/kube-scheduler-config.yaml" "$here/helm/dra-quota-scheduler/files/"
"$here/components/bind/sync-configs.sh"

release=$(sed -n 's/^[[:space:]]*k8s\.io\/kubernetes \(v[0-9][0-9.]*\)$/\1/p' "$here/../tests/e2e/harness/go.mod")
[ -n "$release" ] || { echo "sync-configs.sh: no k8s.io/kubernetes in tests/e2e/harness/go.mod" >&2; exit 1; }
minor=$(echo "$release" | sed 's/^v\([0-9]*\.[0-9]*\)\..*$/\1/')
tag='v[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*'
sed -i "s/^\(  newTag: \)$tag\$/\1$release/" "$here/kustomization.yaml"
sed -i "s/\(registry\.k8s\.io\/kube-scheduler:\)$tag/\1$release/g" "$here/deployment.yaml" "$here/README.md"
sed -i "s/^\(    tag: \)$tag\$/\1$release/" "$here/helm/dra-quota-scheduler/values.yaml"
sed -i "s/^kubeVersion: .*/kubeVersion: \">=$minor.0-0\"/" "$here/helm/dra-quota-scheduler/Chart.yaml"
sed -i "s/^Requirements: Kubernetes [0-9.]* or newer/Requirements: Kubernetes $minor or newer/" "$here/README.md"
for doc in "$here/../README.md" "$here/../docs/deploying.md"; do
  sed -i -e "s/kube-scheduler $tag/kube-scheduler $release/g" \
    -e "s/Kubernetes [0-9][0-9]*\.[0-9][0-9]* or newer/Kubernetes $minor or newer/g" "$doc"
done
