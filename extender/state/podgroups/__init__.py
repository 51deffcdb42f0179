"""Workload-aware scheduling's objects (scheduling.k8s.io/v1beta1 Workload and PodGroup, Kubernetes 1.37)."""
