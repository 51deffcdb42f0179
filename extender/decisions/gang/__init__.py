"""Gangs: what a PodGroup asks of quota as one, and the claims it holds as one (workload-aware scheduling)."""
