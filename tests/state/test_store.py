import textwrap

import orjson
import pytest
import yaml

from extender.state.snapshot_file import SnapshotError, load_snapshot_text
from extender.state.store import ClusterStore
from testkit import builders as b


def _dump(*objects):
    return yaml.safe_dump_all(list(objects))


def test_loads_multi_document_yaml_and_lists():
    text = _dump(
        b.node("n1"),
        {"apiVersion": "v1", "kind": "List", "items": [b.node("n2"), b.gpu_slice("n2", 2)]},
        b.gpu_slice("n1", 4),
        b.device_class(),
    )
    snapshot = load_snapshot_text(text).snapshot()
    assert set(snapshot.nodes) == {"n1", "n2"}
    assert [d.name for d in snapshot.node_devices("n1").devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert len(snapshot.node_devices("n2").devices) == 2
    assert snapshot.synced


def test_loads_json_list():
    text = orjson.dumps({"kind": "List", "apiVersion": "v1", "items": [b.node("n1")]}).decode()
    assert set(load_snapshot_text(text).snapshot().nodes) == {"n1"}


def test_unknown_kinds_are_skipped_with_one_warning(caplog):
    text = _dump(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "b"}},
        b.node("n1"),
    )
    load_snapshot_text(text)
    assert sum("Deployment" in r.getMessage() for r in caplog.records) == 1


def test_malformed_document_names_index_and_field():
    bad = b.gpu_slice("n1", 1)
    bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    with pytest.raises(SnapshotError) as error:
        load_snapshot_text(_dump(b.node("n1"), bad))
    message = str(error.value)
    assert "document 1" in message
    assert "spec.devices[0].capacity.memory.value" in message


def test_wrong_type_is_reported():
    bad = b.node("n1")
    bad["metadata"]["labels"] = ["x"]
    with pytest.raises(SnapshotError, match=r"metadata.labels: must be an object"):
        load_snapshot_text(_dump(bad))


def test_invalid_yaml():
    with pytest.raises(SnapshotError, match="invalid YAML"):
        load_snapshot_text("kind: [")


def test_v1beta1_claims_and_slices_are_converted():
    text = textwrap.dedent(
        """
        apiVersion: resource.k8s.io/v1beta1
        kind: ResourceSlice
        metadata: {name: s1}
        spec:
          driver: gpu.example.com
          nodeName: n1
          pool: {name: n1, generation: 1, resourceSliceCount: 1}
          devices:
          - name: gpu-0
            basic:
              attributes: {model: {string: X}}
              capacity: {memory: {value: 4Gi}}
        ---
        apiVersion: resource.k8s.io/v1beta1
        kind: ResourceClaim
        metadata: {name: c1, namespace: ns}
        spec:
          devices:
            requests:
            - name: gpu
              deviceClassName: gpu.example.com
              count: 2
        """
    )
    snapshot = load_snapshot_text(text).snapshot()
    device = snapshot.slices["s1"].devices[0]
    assert device.attributes["gpu.example.com/model"].value == "X"
    assert device.capacity["gpu.example.com/memory"] == 4 * 2**30
    request = snapshot.claims["ns/c1"].spec.requests[0]
    assert request.exactly is not None and request.exactly.count == 2


def test_pool_generations_and_completeness():
    store = ClusterStore()
    store.apply("Node", "ADDED", b.node("n1"))
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("n1", 2, generation=1, name="old"))
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("n1", 3, generation=2, slice_count=2, name="new-a"))
    snapshot = store.snapshot()
    pool = snapshot.pools[("gpu.example.com", "n1")]
    assert pool.generation == 2 and pool.incomplete
    assert len(snapshot.node_devices("n1").devices) == 3
    second = b.gpu_slice("n1", 0, generation=2, slice_count=2, name="new-b", devices=[b.gpu_device(9, node_name="n1")])
    store.apply("ResourceSlice", "ADDED", second)
    snapshot = store.snapshot()
    assert not snapshot.pools[("gpu.example.com", "n1")].incomplete
    assert len(snapshot.node_devices("n1").devices) == 4


def test_duplicate_device_names_make_pool_invalid():
    store = ClusterStore()
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("n1", 2, slice_count=2, name="a"))
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("n1", 2, slice_count=2, name="b"))
    assert "duplicate device name" in store.snapshot().pools[("gpu.example.com", "n1")].invalid_reason


def test_node_selector_and_all_nodes_slices():
    store = ClusterStore()
    store.apply("Node", "ADDED", b.node("n1", {"rack": "r1"}))
    store.apply("Node", "ADDED", b.node("n2", {"rack": "r2"}))
    selector_slice = b.gpu_slice("x", 1, name="rack1", pool="rack1")
    del selector_slice["spec"]["nodeName"]
    selector_slice["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]
    }
    everywhere = b.gpu_slice("x", 1, name="net", pool="net")
    del everywhere["spec"]["nodeName"]
    everywhere["spec"]["allNodes"] = True
    by_name = b.gpu_slice("x", 1, name="byname", pool="byname")
    del by_name["spec"]["nodeName"]
    by_name["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
    }
    for obj in (selector_slice, everywhere, by_name):
        store.apply("ResourceSlice", "ADDED", obj)
    snapshot = store.snapshot()
    assert {d.pool for d in snapshot.node_devices("n1").devices} == {"rack1", "net"}
    assert {d.pool for d in snapshot.node_devices("n2").devices} == {"net", "byname"}
    # a label change moves the rack slice
    store.apply("Node", "MODIFIED", b.node("n2", {"rack": "r1"}))
    assert {d.pool for d in store.snapshot().node_devices("n2").devices} == {"rack1", "net", "byname"}


def test_per_device_node_selection():
    store = ClusterStore()
    store.apply("Node", "ADDED", b.node("n1"))
    store.apply("Node", "ADDED", b.node("n2"))
    obj = b.gpu_slice("x", 0, name="pd", pool="pd", devices=[b.gpu_device(0), b.gpu_device(1)])
    del obj["spec"]["nodeName"]
    obj["spec"]["perDeviceNodeSelection"] = True
    obj["spec"]["devices"][0]["nodeName"] = "n1"
    obj["spec"]["devices"][1]["allNodes"] = True
    store.apply("ResourceSlice", "ADDED", obj)
    snapshot = store.snapshot()
    assert [d.name for d in snapshot.node_devices("n1").devices] == ["gpu-0", "gpu-1"]
    assert [d.name for d in snapshot.node_devices("n2").devices] == ["gpu-1"]


def test_allocated_devices_follow_claim_events():
    store = ClusterStore()
    allocated = b.claim("c1", "ns", [b.exact_request()], allocated=[("gpu", "n1", "gpu-0"), ("gpu", "n1", "gpu-1")])
    store.apply("ResourceClaim", "ADDED", allocated)
    admin = b.claim("c2", "ns", [b.exact_request(admin=True)], allocated=[("gpu", "n1", "gpu-2")], admin_results=True)
    store.apply("ResourceClaim", "ADDED", admin)
    snapshot = store.snapshot()
    assert set(snapshot.allocated) == {("gpu.example.com", "n1", "gpu-0"), ("gpu.example.com", "n1", "gpu-1")}
    store.apply("ResourceClaim", "MODIFIED", b.claim("c1", "ns", [b.exact_request()]))
    assert dict(store.snapshot().allocated) == {}
    store.apply("ResourceClaim", "ADDED", allocated)
    store.apply("ResourceClaim", "DELETED", allocated)
    assert dict(store.snapshot().allocated) == {}


def test_snapshot_is_immutable_view_and_changes_are_listed():
    store = ClusterStore()
    store.apply("Node", "ADDED", b.node("n1"))
    first = store.snapshot()
    store.apply("Node", "ADDED", b.node("n2"))
    store.apply("Pod", "ADDED", b.pod("p", "ns"))
    second = store.snapshot()
    assert set(first.nodes) == {"n1"}
    assert set(second.nodes) == {"n1", "n2"}
    changes = second.changes_since(first.version)
    assert [(c.kind, c.key) for c in changes] == [("Node", "n2"), ("Pod", "ns/p")]
    assert second.changes_since(second.version) == []
    assert store.snapshot() is second


def test_replace_drops_vanished_objects_and_reports_bad_ones():
    store = ClusterStore()
    store.apply("Node", "ADDED", b.node("n1"))
    bad = b.node("n3")
    bad["metadata"]["labels"] = "nope"
    errors = store.replace("Node", [b.node("n2"), bad])
    assert set(store.snapshot().nodes) == {"n2"}
    assert len(errors) == 1 and "Node n3" in str(errors[0])


def test_generated_claim_lookup_by_annotation_and_owner():
    store = ClusterStore()
    pod_obj = b.pod("p", "ns", templates={"gpu": "tmpl"})
    store.apply("Pod", "ADDED", pod_obj)
    store.apply(
        "ResourceClaim",
        "ADDED",
        b.claim("p-gpu-abc", "ns", [b.exact_request()], owner_uid="uid-ns-p", pod_claim_name="gpu"),
    )
    snapshot = store.snapshot()
    pod = snapshot.pods["ns/p"]
    found = snapshot.claim_for_pod(pod, pod.claims[0])
    assert found is not None and found.name == "p-gpu-abc"


def test_a_snapshot_keeps_what_it_saw_while_bindings_go_on():
    """Pods, claims, allocated devices and generated claims are persistent maps (store.py PERSISTENT_KINDS): a
    snapshot takes them as they are, so the events after it must not reach it, and kinds no event touched
    stay the same objects from one snapshot to the next."""
    store = ClusterStore()
    store.apply("Node", "ADDED", b.node("n1"))
    store.apply("Pod", "ADDED", b.pod("p", "ns", templates={"gpu": "tmpl"}))
    before = store.snapshot()
    claim = b.claim(
        "p-gpu-abc",
        "ns",
        [b.exact_request()],
        allocated=[("gpu", "n1", "gpu-0")],
        owner_uid="uid-ns-p",
        pod_claim_name="gpu",
    )
    store.apply("ResourceClaim", "ADDED", claim)
    store.apply("Pod", "MODIFIED", b.pod("p", "ns", templates={"gpu": "tmpl"}, node_name="n1"))
    bound = store.snapshot()
    store.apply("ResourceClaim", "DELETED", claim)
    store.apply("Pod", "DELETED", b.pod("p", "ns"))
    gone = store.snapshot()

    device = ("gpu.example.com", "n1", "gpu-0")
    assert before.pods["ns/p"].node_name == "" and not before.claims and not before.allocated
    assert not before.generated_claims
    assert bound.pods["ns/p"].node_name == "n1" and set(bound.claims) == {"ns/p-gpu-abc"}
    assert dict(bound.allocated) == {device: 1}
    assert dict(bound.generated_claims) == {("ns", "uid-ns-p", "gpu"): "ns/p-gpu-abc"}
    assert not gone.pods and not gone.claims and not gone.allocated and not gone.generated_claims
    assert bound.shared_alloc_version != gone.shared_alloc_version  # (no slice publishes the device here)
    assert gone.nodes is bound.nodes is before.nodes
    assert gone.workloads is bound.workloads and gone.admitted_workloads is bound.admitted_workloads
