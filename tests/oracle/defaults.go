package main

// API defaulting. The scheduler only ever sees objects that went through the API
// server, which fills in defaults (pkg/apis/resource/v1 in Kubernetes); the
// allocator relies on them (e.g. it rejects an empty allocationMode). Scenarios are
// often written by hand or generated, so the oracle applies the same defaults.

import (
	resourceapi "k8s.io/api/resource/v1"
)

func defaultCountMode(mode *resourceapi.DeviceAllocationMode, count *int64) {
	if *mode == "" {
		*mode = resourceapi.DeviceAllocationModeExactCount
	}
	if *mode == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
		*count = 1
	}
}

func defaultTolerations(tolerations []resourceapi.DeviceToleration) {
	for i := range tolerations {
		if tolerations[i].Operator == "" {
			tolerations[i].Operator = resourceapi.DeviceTolerationOpEqual
		}
	}
}

// defaultClaim mirrors SetObjectDefaults_ResourceClaim.
func defaultClaim(claim *resourceapi.ResourceClaim) {
	if claim == nil {
		return
	}
	for i := range claim.Spec.Devices.Requests {
		req := &claim.Spec.Devices.Requests[i]
		if req.Exactly != nil {
			defaultCountMode(&req.Exactly.AllocationMode, &req.Exactly.Count)
			defaultTolerations(req.Exactly.Tolerations)
		}
		for j := range req.FirstAvailable {
			sub := &req.FirstAvailable[j]
			defaultCountMode(&sub.AllocationMode, &sub.Count)
			defaultTolerations(sub.Tolerations)
		}
	}
	if claim.Status.Allocation != nil {
		for i := range claim.Status.Allocation.Devices.Results {
			defaultTolerations(claim.Status.Allocation.Devices.Results[i].Tolerations)
		}
	}
}

// applyDefaults defaults every claim of the scenario. ResourceSlice defaulting only
// sets taints' timeAdded, which the allocator does not look at.
func applyDefaults(sc *Scenario) {
	for _, c := range sc.Claims {
		defaultClaim(c)
	}
	for _, c := range sc.AllocatedClaims {
		defaultClaim(c)
	}
}
