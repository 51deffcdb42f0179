package main

// Scenario decoding and the per-node decision, modelled on what kube-scheduler's
// DynamicResources plugin does in PreFilter (validate classes, gather the allocated
// state, build one allocator per pod) and Filter (one Allocate call per node).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
)

// Scenario is one input document. See README.md for the format.
type Scenario struct {
	// Name is echoed back unchanged so that callers can correlate results.
	Name            string                       `json:"name,omitempty"`
	Features        map[string]bool              `json:"features,omitempty"`
	Nodes           []*v1.Node                   `json:"nodes,omitempty"`
	ResourceSlices  []*resourceapi.ResourceSlice `json:"resourceSlices,omitempty"`
	DeviceClasses   []*resourceapi.DeviceClass   `json:"deviceClasses,omitempty"`
	AllocatedClaims []*resourceapi.ResourceClaim `json:"allocatedClaims,omitempty"`
	Claims          []*resourceapi.ResourceClaim `json:"claims,omitempty"`
	NodeNames       []string                     `json:"nodeNames,omitempty"`
}

// ScenarioResult is one output document.
type ScenarioResult struct {
	Name string `json:"name,omitempty"`
	// Features are the effective allocator features (defaults merged with the input).
	Features map[string]bool `json:"features"`
	// Allocator is the implementation picked by structured.NewAllocator
	// ("stable", "incubating" or "experimental"); empty when no allocator was needed.
	Allocator string                 `json:"allocator"`
	Nodes     map[string]*NodeResult `json:"nodes"`
	// Error is set when the scenario itself could not be evaluated (bad JSON,
	// unknown feature, NewAllocator failure). Nodes is empty then.
	Error string `json:"error"`
}

// NodeResult is the verdict for one node.
type NodeResult struct {
	Feasible   bool              `json:"feasible"`
	Allocation []ClaimAllocation `json:"allocation"`
	// Error: Allocate returned an error that the scheduler treats as fatal for
	// the pod (statusError), e.g. a CEL runtime error. Feasible is false.
	Error string `json:"error"`
	// Reason: why the node is unschedulable when the scheduler would say so with
	// a message (ErrFailedAllocationOnNode, an allocated claim's node selector
	// does not match, a missing device class). Empty for a plain "no solution".
	Reason string `json:"reason"`
}

// ClaimAllocation is the allocation computed for one claim.
type ClaimAllocation struct {
	Claim   string         `json:"claim"`
	Results []DeviceResult `json:"results"`
}

// DeviceResult is one allocated device.
type DeviceResult struct {
	Request          string            `json:"request"`
	Driver           string            `json:"driver"`
	Pool             string            `json:"pool"`
	Device           string            `json:"device"`
	AdminAccess      bool              `json:"adminAccess"`
	Shared           bool              `json:"shared,omitempty"`
	ConsumedCapacity map[string]string `json:"consumedCapacity,omitempty"`
}

// featureDefaults are the Kubernetes 1.37 default feature gates, mapped the way
// dynamicresources.AllocatorFeatures maps them.
var featureDefaults = map[string]bool{
	"adminAccess":             true,  // DRAAdminAccess: GA
	"prioritizedList":         true,  // DRAPrioritizedList: GA
	"partitionableDevices":    true,  // DRAPartitionableDevices: beta, on
	"deviceTaints":            true,  // DRADeviceTaints: GA
	"consumableCapacity":      true,  // DRAConsumableCapacity: beta, on
	"deviceBindingAndStatus":  true,  // DRADeviceBindingConditions && DRAResourceClaimDeviceStatus
	"fractionalCapacityRange": false, // DRAFractionalCapacityRange: on only at compatibility version 1.37
	"listTypeAttributes":      false, // alpha
	"optionalNodeOperations":  false, // alpha
	"derivedAttributes":       false, // alpha
	"compatibilityGroups":     false, // alpha
}

func effectiveFeatures(in map[string]bool) (map[string]bool, structured.Features, error) {
	eff := make(map[string]bool, len(featureDefaults))
	for k, v := range featureDefaults {
		eff[k] = v
	}
	var unknown []string
	for k, v := range in {
		if _, ok := featureDefaults[k]; !ok {
			unknown = append(unknown, k)
			continue
		}
		eff[k] = v
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, structured.Features{}, fmt.Errorf("unknown feature(s) %s", strings.Join(unknown, ", "))
	}
	return eff, structured.Features{
		AdminAccess:             eff["adminAccess"],
		PrioritizedList:         eff["prioritizedList"],
		PartitionableDevices:    eff["partitionableDevices"],
		DeviceTaints:            eff["deviceTaints"],
		DeviceBindingAndStatus:  eff["deviceBindingAndStatus"],
		ConsumableCapacity:      eff["consumableCapacity"],
		FractionalCapacityRange: eff["fractionalCapacityRange"],
		ListTypeAttributes:      eff["listTypeAttributes"],
		OptionalNodeOperations:  eff["optionalNodeOperations"],
		DerivedAttributes:       eff["derivedAttributes"],
		CompatibilityGroups:     eff["compatibilityGroups"],
	}, nil
}

// CEL caches shared by all scenarios with the same CEL features, like the one
// cache the scheduler plugin keeps (10 entries, LRU).
var (
	celCachesMutex sync.Mutex
	celCaches      = map[cel.Features]*cel.Cache{}
)

func celCacheFor(f cel.Features) *cel.Cache {
	celCachesMutex.Lock()
	defer celCachesMutex.Unlock()
	c, ok := celCaches[f]
	if !ok {
		c = cel.NewCache(10, f)
		celCaches[f] = c
	}
	return c
}

// classLister serves DeviceClasses from the scenario (structured.DeviceClassLister).
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// prepared is what PreFilter computes once per pod: the allocator and the
// per-claim information that Filter needs for every node.
type prepared struct {
	eff       map[string]bool
	allocator structured.Allocator
	channel   string
	// toAllocate are the claims without status.allocation, in input order.
	toAllocate []*resourceapi.ResourceClaim
	// allocatedSelectors: node selectors of the pod's already allocated claims.
	allocatedSelectors []*nodeaffinity.NodeSelector
	nodes              []*v1.Node
	// podVerdict is set when PreFilter already decides for every node.
	podVerdict *NodeResult
}

// addAllocated records the devices of one allocated claim the way the plugin's
// allocatedDevices tracker and GatherAllocatedState / ListAllAllocatedDevices do.
func addAllocated(state *structured.AllocatedState, claim *resourceapi.ResourceClaim, consumable bool) {
	if claim == nil || claim.Status.Allocation == nil {
		return
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue // admin access does not use up the device
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil {
			if consumable {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			// Without consumable capacity a shared allocation blocks the whole device.
		}
		state.AllocatedDevices.Insert(id)
	}
}

func prepare(ctx context.Context, sc *Scenario) (*prepared, error) {
	eff, features, err := effectiveFeatures(sc.Features)
	if err != nil {
		return nil, err
	}
	p := &prepared{eff: eff}

	// Nodes to evaluate: nodeNames in order, or all nodes. A name without a Node
	// object gets a bare Node with that name and no labels.
	byName := make(map[string]*v1.Node, len(sc.Nodes))
	for _, n := range sc.Nodes {
		if n == nil {
			continue
		}
		byName[n.Name] = n
	}
	names := sc.NodeNames
	if names == nil {
		for _, n := range sc.Nodes {
			if n != nil {
				names = append(names, n.Name)
			}
		}
	}
	for _, name := range names {
		n, ok := byName[name]
		if !ok {
			n = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		}
		p.nodes = append(p.nodes, n)
	}

	classes := make(classLister, len(sc.DeviceClasses))
	for _, c := range sc.DeviceClasses {
		if c != nil {
			classes[c.Name] = c
		}
	}

	// PreFilter: allocated claims only need their node selector checked; the
	// others need all their device classes to exist.
	for _, claim := range sc.Claims {
		if claim == nil {
			return nil, errors.New("null claim")
		}
		if claim.Status.Allocation != nil {
			if claim.Status.Allocation.NodeSelector != nil {
				sel, err := nodeaffinity.NewNodeSelector(claim.Status.Allocation.NodeSelector)
				if err != nil {
					p.podVerdict = &NodeResult{Error: err.Error()}
					return p, nil
				}
				p.allocatedSelectors = append(p.allocatedSelectors, sel)
			}
			continue
		}
		p.toAllocate = append(p.toAllocate, claim)
		for _, req := range claim.Spec.Devices.Requests {
			switch {
			case req.Exactly != nil:
				if v := validateClass(classes, req.Exactly.DeviceClassName, req.Name); v != nil {
					p.podVerdict = v
					return p, nil
				}
			case len(req.FirstAvailable) > 0:
				if !features.PrioritizedList {
					p.podVerdict = &NodeResult{Reason: fmt.Sprintf("resource claim %s, request %s: has subrequests, but the DRAPrioritizedList feature is disabled", klog.KObj(claim), req.Name)}
					return p, nil
				}
				for _, sub := range req.FirstAvailable {
					if v := validateClass(classes, sub.DeviceClassName, req.Name+"/"+sub.Name); v != nil {
						p.podVerdict = v
						return p, nil
					}
				}
			default:
				p.podVerdict = &NodeResult{Reason: fmt.Sprintf("resource claim %s, request %s: unknown request type", klog.KObj(claim), req.Name)}
				return p, nil
			}
		}
	}
	if len(p.toAllocate) == 0 {
		return p, nil
	}

	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, c := range sc.AllocatedClaims {
		addAllocated(&state, c, features.ConsumableCapacity)
	}
	for _, c := range sc.Claims {
		addAllocated(&state, c, features.ConsumableCapacity)
	}

	slices := make([]*resourceapi.ResourceSlice, 0, len(sc.ResourceSlices))
	for _, s := range sc.ResourceSlices {
		if s != nil {
			slices = append(slices, s)
		}
	}
	cache := celCacheFor(cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	})
	alloc, err := structured.NewAllocator(ctx, features, state, classes, slices, cache)
	if err != nil {
		return nil, fmt.Errorf("NewAllocator: %w", err)
	}
	p.allocator = alloc
	p.channel = allocatorChannel(alloc)
	return p, nil
}

func validateClass(classes classLister, className, requestName string) *NodeResult {
	if className == "" {
		return &NodeResult{Error: fmt.Sprintf("request %s: unsupported request type", requestName)}
	}
	if _, err := classes.Get(className); err != nil {
		return &NodeResult{Reason: fmt.Sprintf("request %s: device class %s does not exist", requestName, className)}
	}
	return nil
}

// allocatorChannel asks the (internal) allocator which implementation it is.
func allocatorChannel(a structured.Allocator) string {
	m := reflect.ValueOf(a).MethodByName("Channel")
	if !m.IsValid() {
		return ""
	}
	out := m.Call(nil)
	if len(out) != 1 {
		return ""
	}
	return out[0].String()
}

// decide is Filter for one node.
func (p *prepared) decide(ctx context.Context, node *v1.Node, timeout time.Duration) *NodeResult {
	if p.podVerdict != nil {
		v := *p.podVerdict
		v.Allocation = []ClaimAllocation{}
		return &v
	}
	res := &NodeResult{Allocation: []ClaimAllocation{}}
	if p.allocator != nil {
		actx := ctx
		if timeout > 0 {
			c, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			actx = c
		}
		results, err := p.allocator.Allocate(actx, node, p.toAllocate)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			res.Error = fmt.Sprintf("node %s: timed out trying to allocate devices", node.Name)
			return res
		case errors.Is(err, structured.ErrFailedAllocationOnNode):
			res.Reason = err.Error()
			return res
		case err != nil:
			res.Error = err.Error()
			return res
		}
		if len(results) != len(p.toAllocate) {
			return res
		}
		for i, r := range results {
			res.Allocation = append(res.Allocation, ClaimAllocation{
				Claim:   klog.KObj(p.toAllocate[i]).String(),
				Results: deviceResults(r.Devices.Results),
			})
		}
	}
	for _, sel := range p.allocatedSelectors {
		if !sel.Match(node) {
			res.Allocation = []ClaimAllocation{}
			res.Reason = "resourceclaim not available on the node"
			return res
		}
	}
	res.Feasible = true
	return res
}

func deviceResults(in []resourceapi.DeviceRequestAllocationResult) []DeviceResult {
	out := make([]DeviceResult, 0, len(in))
	for _, r := range in {
		d := DeviceResult{
			Request:     r.Request,
			Driver:      r.Driver,
			Pool:        r.Pool,
			Device:      r.Device,
			AdminAccess: r.AdminAccess != nil && *r.AdminAccess,
			Shared:      r.ShareID != nil,
		}
		if len(r.ConsumedCapacity) > 0 {
			d.ConsumedCapacity = make(map[string]string, len(r.ConsumedCapacity))
			for k, q := range r.ConsumedCapacity {
				d.ConsumedCapacity[string(k)] = q.String()
			}
		}
		out = append(out, d)
	}
	return out
}

// evaluate runs one scenario over all its nodes.
func evaluate(ctx context.Context, raw json.RawMessage, timeout time.Duration) *ScenarioResult {
	out := &ScenarioResult{Features: map[string]bool{}, Nodes: map[string]*NodeResult{}}
	var sc Scenario
	if err := json.Unmarshal(raw, &sc); err != nil {
		out.Error = "decode scenario: " + err.Error()
		return out
	}
	out.Name = sc.Name
	applyDefaults(&sc)
	p, err := prepare(ctx, &sc)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Features = p.eff
	out.Allocator = p.channel
	for _, n := range p.nodes {
		out.Nodes[n.Name] = p.decide(ctx, n, timeout)
	}
	return out
}
