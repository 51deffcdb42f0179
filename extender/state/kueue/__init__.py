"""Kueue's objects as typed, immutable models.

The extender answers "does this pod's ClusterQueue still have quota here?" with Kueue's own arithmetic, so it
must read ClusterQueues, Cohorts, ResourceFlavors, LocalQueues, Workloads and Kueue's deviceClassMappings
exactly as Kueue (v0.19) does. Snapshots are hand-written or dumped by people, so each parser checks what the
CRD schema and Kueue's admission webhooks would have checked, and names the offending field path; fields we
do not use are ignored so that newer Kueue versions keep loading.

Where served API versions differ (v1beta1 `spec.cohort` vs v1beta2 `spec.cohortName`, v1beta1's deprecated
flavorFungibility values `Borrow`/`Preempt`), the model holds the v1beta2 meaning, as Kueue's conversion does.
"""
