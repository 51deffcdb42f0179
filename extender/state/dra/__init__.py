"""resource.k8s.io objects: ResourceSlice, DeviceTaintRule, DeviceClass, ResourceClaim, ResourceClaimTemplate.

v1 and v1beta2 share one shape; v1beta1 (requests without the `exactly` wrapper, devices under `basic`) is
converted here so that every layer above sees one model, whatever Kubernetes release the cluster runs.
"""
