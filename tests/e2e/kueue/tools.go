//go:build tools

// Package kueue pins Kueue's controller manager for the end-to-end tests. It is never compiled into
// anything: the blank import only keeps sigs.k8s.io/kueue/cmd/kueue (and so its exact module versions)
// in go.mod and go.sum, so that `go build sigs.k8s.io/kueue/cmd/kueue` inside this module builds the
// pinned release. It is a module of its own, separate from ../harness, because Kueue v0.19.2 depends on
// the k8s.io/* v0.36 libraries while the control plane is built from v0.37.
package kueue

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
