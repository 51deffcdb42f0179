//go:build tools

// Package harness pins the control-plane components that the end-to-end tests run.
// It is never compiled into anything: the blank imports only keep the command
// packages (and so their exact module versions) in go.mod and go.sum, so that
// `go build <package>` inside this module builds the pinned releases.
package harness

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
