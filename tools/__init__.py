"""Build tools the repository's tests and `make` targets use: helm and kustomize built from Go modules."""
