// Our own exporter for upstream's allocator test table. It is never built in this repository: at test time
// tests/upstream_table/table.py copies k8s.io/dynamic-resource-allocation@v0.37.2 from the Go module cache
// into a temporary directory, adds one hook to that copy's RunTestAllocator (structured/internal/
// allocatortesting/allocator_testing.go) and puts this file next to it. `go test -c` then builds a binary
// whose TestTableExport calls upstream's TestAllocator and TestLexicographicalAllocator; the hook hands us
// each table (name -> AllocatorTestCase) instead of running it, and we serialise every case to JSON.
//
// For every case we also run upstream's allocators ourselves, the way RunTestAllocator does:
//   - "expected": the experimental allocator (it supports every feature, and every case of both tables
//     passes on it) with the case's own features; upstream's own matchers (expectError, ConsistOf
//     expectResults) are applied to that answer and any mismatch is reported in "checkFailures", so the
//     recorded answer is what the table expects, not merely what some allocator said.
//   - "variants": the same case on every implementation that supports its features (stable, incubating,
//     experimental, as structured.NewAllocator would pick among them) and with the input order reversed
//     (slices, the devices in each slice, classes). When all variants give the same set of devices, the
//     table's answer does not depend on iteration order and the Python side compares devices too.
//   - "defaults": the case's features plus Kubernetes 1.37's default-on gates, on the implementation
//     structured.NewAllocator would pick for them: what a 1.37 cluster with default gates would answer.
package allocatortesting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured/internal"
	"k8s.io/dynamic-resource-allocation/structured/internal/experimental"
	"k8s.io/dynamic-resource-allocation/structured/internal/incubating"
	"k8s.io/dynamic-resource-allocation/structured/internal/stable"
)

type exportedDeviceID struct {
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
}

type exportedCapacity struct {
	exportedDeviceID
	Capacity map[string]string `json:"capacity"`
}

// exportedRun is one Allocate call: its results (Kubernetes JSON of AllocationResult, shareIDs replaced by
// the table's fixed one), or its error and whether that error wraps ErrFailedAllocationOnNode.
type exportedRun struct {
	Label          string                         `json:"label"`
	Channel        string                         `json:"channel"`
	Results        []resourceapi.AllocationResult `json:"results"`
	Error          string                         `json:"error"`
	FailedOnNode   bool                           `json:"failedOnNode"`
	NumAllocateOne int64                          `json:"numAllocateOne"`
}

type exportedCase struct {
	Name                     string                       `json:"name"`
	Source                   string                       `json:"source"`
	Features                 []string                     `json:"features"`
	DefaultFeatures          []string                     `json:"defaultFeatures"`
	Claims                   []*resourceapi.ResourceClaim `json:"claims"`
	AllocatedDevices         []exportedDeviceID           `json:"allocatedDevices"`
	AllocatedSharedDeviceIDs []exportedDeviceID           `json:"allocatedSharedDeviceIDs"`
	AllocatedCapacity        []exportedCapacity           `json:"allocatedCapacity"`
	Classes                  []*resourceapi.DeviceClass   `json:"classes"`
	Slices                   []*resourceapi.ResourceSlice `json:"slices"`
	Node                     *v1.Node                     `json:"node"`
	ExpectError              bool                         `json:"expectError"`
	ExpectNumAllocateOne     int64                        `json:"expectNumAllocateOne"`
	Expected                 exportedRun                  `json:"expected"`
	CheckFailures            []string                     `json:"checkFailures"`
	Variants                 []exportedRun                `json:"variants"`
	Defaults                 exportedRun                  `json:"defaults"`
}

type implementation struct {
	name      string
	supported Features
	build     func(ctx context.Context, f Features, s AllocatedState, l DeviceClassLister, sl []*resourceapi.ResourceSlice, c *cel.Cache) (Allocator, error)
}

// implementations in the order structured.NewAllocator tries them (structured/allocator.go).
var implementations = []implementation{
	{"stable", stable.SupportedFeatures, func(ctx context.Context, f Features, s AllocatedState, l DeviceClassLister, sl []*resourceapi.ResourceSlice, c *cel.Cache) (Allocator, error) {
		return stable.NewAllocator(ctx, f, s.AllocatedDevices, l, sl, c)
	}},
	{"incubating", incubating.SupportedFeatures, func(ctx context.Context, f Features, s AllocatedState, l DeviceClassLister, sl []*resourceapi.ResourceSlice, c *cel.Cache) (Allocator, error) {
		return incubating.NewAllocator(ctx, f, s, l, sl, c)
	}},
	{"experimental", experimental.SupportedFeatures, func(ctx context.Context, f Features, s AllocatedState, l DeviceClassLister, sl []*resourceapi.ResourceSlice, c *cel.Cache) (Allocator, error) {
		return experimental.NewAllocator(ctx, f, s, l, sl, c)
	}},
}

// withDefaults turns on the gates that Kubernetes 1.37 enables by default (pkg/features/kube_features.go):
// DRAAdminAccess, DRAPrioritizedList, DRADeviceTaints (GA), DRAPartitionableDevices, DRAConsumableCapacity,
// DRADeviceBindingConditions+DRAResourceClaimDeviceStatus, DRAFractionalCapacityRange (beta, on).
func withDefaults(f Features) Features {
	f.AdminAccess = true
	f.PrioritizedList = true
	f.DeviceTaints = true
	f.PartitionableDevices = true
	f.ConsumableCapacity = true
	f.DeviceBindingAndStatus = true
	f.FractionalCapacityRange = true
	return f
}

func pick(f Features) implementation {
	for _, impl := range implementations {
		if impl.supported.Set().IsSuperset(f.Set()) {
			return impl
		}
	}
	panic(fmt.Sprintf("no implementation supports %v", sets.List(f.Set())))
}

func runOne(impl implementation, label string, tc AllocatorTestCase, features Features, reverse bool) (exportedRun, []resourceapi.AllocationResult, error) {
	ctx := context.Background()
	var lister informerLister[resourceapi.DeviceClass]
	for _, c := range tc.classes {
		lister.objs = append(lister.objs, c.DeepCopy())
	}
	var sl []*resourceapi.ResourceSlice
	for _, s := range tc.slices {
		sl = append(sl, s.DeepCopy())
	}
	if reverse {
		slices.Reverse(lister.objs)
		slices.Reverse(sl)
		for _, s := range sl {
			slices.Reverse(s.Spec.Devices)
		}
	}
	state := AllocatedState{
		AllocatedDevices:         sets.New(slices.Clone(tc.allocatedDevices)...),
		AllocatedSharedDeviceIDs: tc.allocatedSharedDeviceIDs,
		AggregatedCapacity:       tc.allocatedCapacityDevices.Clone(),
	}
	run := exportedRun{Label: label, Channel: impl.name, Results: []resourceapi.AllocationResult{}}
	allocator, err := impl.build(ctx, features, state, lister, sl, cel.NewCache(1, cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	}))
	if err != nil {
		run.Error = "NewAllocator: " + err.Error()
		return run, nil, err
	}
	node := tc.node
	if node == nil {
		node = defaultNode()
	}
	var claims []*resourceapi.ResourceClaim
	for _, c := range tc.claimsToAllocate {
		claims = append(claims, c.DeepCopy())
	}
	results, err := allocator.Allocate(ctx, node, claims)
	for ri := range results {
		for ai := range results[ri].Devices.Results {
			if results[ri].Devices.Results[ai].ShareID != nil {
				results[ri].Devices.Results[ai].ShareID = &fixedShareID
			}
		}
	}
	if err != nil {
		run.Error = err.Error()
		run.FailedOnNode = errors.Is(err, internal.ErrFailedAllocationOnNode)
	}
	if results != nil {
		run.Results = results
	}
	if ext, ok := allocator.(internal.AllocatorExtended); ok {
		run.NumAllocateOne = ext.GetStats().NumAllocateOneInvocations
	}
	return run, results, err
}

func defaultNode() *v1.Node { return node(node1, region1) }

func deviceIDs(ids []DeviceID) []exportedDeviceID {
	out := []exportedDeviceID{}
	for _, id := range ids {
		out = append(out, exportedDeviceID{Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()})
	}
	return out
}

func exportCase(source, name string, tc AllocatorTestCase) exportedCase {
	out := exportedCase{
		Name:                     name,
		Source:                   source,
		Features:                 sets.List(tc.features.Set()),
		DefaultFeatures:          sets.List(withDefaults(tc.features).Set()),
		Claims:                   unwrap(tc.claimsToAllocate...),
		AllocatedDevices:         deviceIDs(tc.allocatedDevices),
		AllocatedSharedDeviceIDs: []exportedDeviceID{},
		AllocatedCapacity:        []exportedCapacity{},
		Classes:                  tc.classes,
		Slices:                   tc.slices,
		Node:                     tc.node,
		ExpectError:              tc.expectError != nil,
		ExpectNumAllocateOne:     tc.expectNumAllocateOneInvocations,
		CheckFailures:            []string{},
	}
	if out.Claims == nil {
		out.Claims = []*resourceapi.ResourceClaim{}
	}
	if out.Node == nil {
		out.Node = defaultNode()
	}
	for id := range tc.allocatedSharedDeviceIDs {
		out.AllocatedSharedDeviceIDs = append(out.AllocatedSharedDeviceIDs, exportedDeviceID{
			Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String(), ShareID: id.ShareID.String(),
		})
	}
	sort.Slice(out.AllocatedSharedDeviceIDs, func(i, j int) bool {
		return fmt.Sprint(out.AllocatedSharedDeviceIDs[i]) < fmt.Sprint(out.AllocatedSharedDeviceIDs[j])
	})
	for id, consumed := range tc.allocatedCapacityDevices {
		capacity := map[string]string{}
		for k, q := range consumed {
			capacity[string(k)] = q.String()
		}
		out.AllocatedCapacity = append(out.AllocatedCapacity, exportedCapacity{
			exportedDeviceID: exportedDeviceID{Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()},
			Capacity:         capacity,
		})
	}
	sort.Slice(out.AllocatedCapacity, func(i, j int) bool {
		return fmt.Sprint(out.AllocatedCapacity[i].exportedDeviceID) < fmt.Sprint(out.AllocatedCapacity[j].exportedDeviceID)
	})

	// The table's answer, checked with the table's own matchers.
	exp := implementations[len(implementations)-1]
	run, results, err := runOne(exp, "experimental", tc, tc.features, false)
	out.Expected = run
	g := gomega.NewGomega(func(message string, _ ...int) { out.CheckFailures = append(out.CheckFailures, message) })
	matchError := tc.expectError
	if matchError == nil {
		matchError = gomega.Not(gomega.HaveOccurred())
	}
	g.Expect(err).To(matchError)
	g.Expect(results).To(gomega.ConsistOf(tc.expectResults...))

	for _, impl := range implementations {
		if !impl.supported.Set().IsSuperset(tc.features.Set()) {
			continue
		}
		for _, reverse := range []bool{false, true} {
			if impl.name == exp.name && !reverse {
				continue
			}
			label := impl.name
			if reverse {
				label += "-reversed"
			}
			v, _, _ := runOne(impl, label, tc, tc.features, reverse)
			out.Variants = append(out.Variants, v)
		}
	}
	def := withDefaults(tc.features)
	out.Defaults, _, _ = runOne(pick(def), "defaults", tc, def, false)
	return out
}

// tableExportHook is declared by the patched RunTestAllocator (see table.py); RunTestAllocator returns
// without running the cases when it reports true.
func TestTableExport(t *testing.T) {
	target := os.Getenv("TABLE_EXPORT_OUT")
	if target == "" {
		t.Skip("TABLE_EXPORT_OUT not set")
	}
	var cases []exportedCase
	source := ""
	tableExportHook = func(_ *testing.T, testcases map[string]AllocatorTestCase) bool {
		names := make([]string, 0, len(testcases))
		for name := range testcases {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			cases = append(cases, exportCase(source, name, testcases[name]))
		}
		return true
	}
	newAllocator := func(ctx context.Context, f Features, s AllocatedState, l DeviceClassLister, sl []*resourceapi.ResourceSlice, c *cel.Cache) (Allocator, error) {
		return experimental.NewAllocator(ctx, f, s, l, sl, c)
	}
	source = "allocator_testing.go"
	TestAllocator(t, experimental.SupportedFeatures, newAllocator)
	source = "lexicographical_testing.go"
	TestLexicographicalAllocator(t, experimental.SupportedFeatures, newAllocator)
	if len(cases) == 0 {
		t.Fatal("the hook saw no test cases: RunTestAllocator was not patched or not called")
	}
	data, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Sanity: the exported struct carries every field AllocatorTestCase has, so a new upstream field
	// (a new kind of input) fails the export instead of being dropped silently.
	known := []string{"features", "claimsToAllocate", "allocatedDevices", "allocatedSharedDeviceIDs",
		"allocatedCapacityDevices", "classes", "slices", "node", "expectResults", "expectError",
		"expectNumAllocateOneInvocations", "expectNumAllocateOneInvocationsByChannel"}
	typ := reflect.TypeFor[AllocatorTestCase]()
	for i := range typ.NumField() {
		if !slices.Contains(known, typ.Field(i).Name) {
			t.Fatalf("AllocatorTestCase has a field %q the exporter does not know: %s", typ.Field(i).Name, strings.Join(known, ", "))
		}
	}
}
