"""The application service and its single sources: one quota view behind every reader, one config schema, one
memo rule, one set of server settings."""

from __future__ import annotations

import dataclasses
import runpy
import threading
from fractions import Fraction

import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from extender.decisions.devices.features import DEFAULT_FEATURES
from extender.memo import BoundedMemo
from extender.service import ConfigError, ExtenderConfig, parse_config
from extender.service.config import parse_section
from extender.state.kueue.local_queue import QUEUE_NAME_LABEL
from extender.transport.app import create_app
from extender.transport.server import GUNICORN_DEFAULTS
from testkit import builders as b
from testkit.scenarios import cluster_queue, gpu_pod
from tests.support.paths import ROOT
from tests.support.quota import ONE_QUEUE_KEY, allocated_claim, one_queue_objects
from tests.support.scenarios import engine_for

KEY = ONE_QUEUE_KEY


def metric_samples(client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics").get_data(as_text=True)
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def queue_row(client) -> dict:
    (queue,) = client.get("/diagnostics/queues").get_json()["clusterQueues"]
    (row,) = queue["resources"]
    return row


def test_metrics_and_diagnostics_read_the_same_quota_view():
    """Usage changes (a reservation, then a binding turning it into usage): /metrics and /diagnostics/queues agree
    at every step, because both read the service's one reconciled view."""
    service = engine_for(one_queue_objects())
    client = create_app(service).test_client()
    labels = (("cluster_queue", "team-a"), ("flavor", "on-demand"), ("resource", "example.com/gpu"))

    def both() -> tuple[dict, dict]:
        samples = metric_samples(client)
        metrics = {
            "usage": samples[("dra_extender_quota_usage", labels)],
            "reserved": samples[("dra_extender_quota_reserved", labels)],
            "available": samples[("dra_extender_quota_available", labels)],
            "admittedPending": samples[("dra_extender_quota_admitted_pending", labels)],
        }
        row = queue_row(client)
        return metrics, {name: float(row[name]) for name in metrics}

    metrics, queues = both()
    assert metrics == queues == {"usage": 0.0, "reserved": 0.0, "available": 4.0, "admittedPending": 0.0}

    pod = gpu_pod("p1", template="two")
    body = orjson.dumps({"Pod": pod, "NodeNames": ["on-demand-0", "on-demand-1"]})
    assert client.post("/filter", data=body, content_type="application/json").get_json()["NodeNames"]
    metrics, queues = both()
    assert metrics == queues == {"usage": 0.0, "reserved": 2.0, "available": 2.0, "admittedPending": 0.0}

    # The pod binds and its claim is allocated: the reservation turns into usage, and the scrape (which did not
    # reconcile before) shows that without a filter call in between.
    uid = pod["metadata"]["uid"]
    service.store.apply(
        "ResourceClaim",
        "ADDED",
        allocated_claim("p1", 2, uid=uid, owner_uid=uid, pod_claim_name="gpu"),
    )
    service.store.apply("Pod", "MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": "on-demand-0"}})
    metrics, queues = both()
    assert metrics == queues == {"usage": 2.0, "reserved": 0.0, "available": 2.0, "admittedPending": 0.0}
    assert service.quota_view().usage == {KEY: Fraction(2)}

    # Kueue admits a Workload for 1 more GPU whose pod is not placed yet: both show the hold it keeps
    service.store.apply(
        "Workload",
        "ADDED",
        b.workload("w", "team-a", "team-a", {"example.com/gpu": 1}, "on-demand", owner_uid="uid-job-w"),
    )
    metrics, queues = both()
    assert metrics == queues == {"usage": 2.0, "reserved": 0.0, "available": 1.0, "admittedPending": 1.0}


def test_refiltering_a_pod_whose_cluster_queue_was_deleted_is_a_reason_not_an_error():
    service = engine_for(one_queue_objects())
    client = create_app(service).test_client()
    pod = gpu_pod("p1", template="two")
    body = orjson.dumps({"Pod": pod, "NodeNames": ["on-demand-0"]})
    assert client.post("/filter", data=body, content_type="application/json").get_json()["NodeNames"]
    service.store.apply("ClusterQueue", "DELETED", cluster_queue("team-a", {"on-demand": {"nominal": 4}}, cohort=None))
    response = client.post("/filter", data=body, content_type="application/json")
    assert response.status_code == 200
    assert "does not exist" in response.get_json()["FailedAndUnresolvableNodes"]["on-demand-0"]


# --- configuration: the section dataclasses are the single source ---------------------------------------------


def documented(raw: dict) -> dict:
    """The documented file with the options it shows commented out (no default) left out."""
    return {key: value for key, value in raw.items() if value is not None}


def test_documented_defaults_equal_the_code_defaults():
    text = (ROOT / "config" / "extender.yaml").read_text(encoding="utf-8")
    assert parse_config(documented(yaml.safe_load(text))) == ExtenderConfig()


def test_every_option_is_documented():
    documented_text = (ROOT / "config" / "extender.yaml").read_text(encoding="utf-8")

    def keys(section_type: type, prefix: str = "") -> list[str]:
        out = []
        for spec in dataclasses.fields(section_type):
            out.append(prefix + spec.metadata["key"])
            if spec.metadata["section"] is not None:
                out += keys(spec.metadata["section"], prefix + spec.metadata["key"] + ".")
        return out

    for dotted in keys(ExtenderConfig):
        assert f"{dotted.rsplit('.', 1)[-1]}:" in documented_text, f"{dotted} is not documented in config/extender.yaml"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"scoring": {"stratgy": "MostAllocated"}}, "scoring: unknown option(s) stratgy"),
        ({"limits": {"maxBodyBytes": 10}}, "limits.maxBodyBytes: must be an integer >= 1024"),
        ({"limits": {"requestDeadlineSeconds": True}}, "limits.requestDeadlineSeconds: must be a number"),
        ({"scoring": {"strategy": "Random"}}, "scoring.strategy: must be one of MostAllocated, LeastAllocated"),
        ({"scoring": {"weights": {"deviceFit": -1}}}, "scoring.weights.deviceFit: must be an integer >= 0"),
        ({"bind": {"enabled": "yes"}}, "bind.enabled: must be true or false"),
        ({"listen": "8888"}, "listen: must be HOST:PORT"),
        ({"tls": {"certFile": "/nonexistent/cert.pem"}}, "tls.certFile: /nonexistent/cert.pem does not exist"),
        ({"quota": {"deviceClassMappings": [{"name": "x"}]}}, "quota.deviceClassMappings"),
        ({"reservations": []}, "reservations: must be a mapping"),
        ({"nope": 1}, "unknown top-level option(s) nope"),
        ({"logging": {"level": "loud"}}, "logging.level: must be DEBUG, INFO, WARNING or ERROR"),
        ({"features": {"DRAPrioritisedList": False}}, "features: unknown feature gate(s) DRAPrioritisedList"),
        ({"features": {"DRADeviceTaints": "off"}}, "features.DRADeviceTaints: must be true or false"),
        ({"features": {"DRAListTypeAttributes": True}}, "features: DRAListTypeAttributes is alpha and not implemented"),
        ({"features": []}, "features: must be a mapping"),
        ({"features": {"DRAAdminAccess": False}}, "features: DRAAdminAccess is GA and locked to true"),
        (
            {"features": {"DRAConsumableCapacity": False}},
            "features: DRAFractionalCapacityRange needs DRAConsumableCapacity",
        ),
    ],
)
def test_invalid_options_are_refused_with_their_path(raw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(raw)


def test_options_reach_the_typed_sections():
    config = parse_config(
        {
            "scoring": {"strategy": "LeastAllocated", "weights": {"quotaHeadroom": 3}},
            "quota": {"unmappedDeviceClasses": "reject", "kueueConfigMap": {"namespace": "kueue"}},
            "limits": {"requestDeadlineSeconds": 2},
            "diagnostics": {"listen": "127.0.0.1:9090"},
        }
    )
    assert config.decisions.scoring_strategy == "LeastAllocated"
    assert config.decisions.weights.quota_headroom == 3 and config.decisions.weights.device_fit == 2
    assert config.decisions.unmapped_classes == "reject"
    assert config.kueue_config.namespace == "kueue" and config.kueue_config.name == "kueue-manager-config"
    assert config.limits.request_deadline_seconds == 2.0
    assert config.diagnostics.listen == "127.0.0.1:9090"
    assert parse_section(type(config.search), None).budget == 20_000


def test_gunicorn_settings_file_documents_the_defaults():
    settings = runpy.run_path(str(ROOT / "config" / "gunicorn.conf.py"))
    shown = {key: value for key, value in settings.items() if not key.startswith("_")}
    assert shown, "config/gunicorn.conf.py sets nothing"
    for key, value in shown.items():
        assert GUNICORN_DEFAULTS[key] == value, f"{key}: file says {value!r}, code says {GUNICORN_DEFAULTS[key]!r}"


# --- the one memo rule ------------------------------------------------------------------------------------------


def test_bounded_memo_clears_wholesale_when_full_and_keeps_parts_apart():
    memo: BoundedMemo[str, int] = BoundedMemo("test", max_entries=3)
    memo.put("a", 1, table_key="x")
    memo.put("a", 2, table_key="y")
    memo.put("a", 3, table_key="y")  # an overwrite is not a new entry
    assert len(memo) == 2 and memo.get("a", "x") == 1 and memo.get("a", "y") == 3
    assert memo.table("y") == {"a": 3} and memo.table("z") == {}
    memo.put("b", 4, table_key="x")
    memo.put("c", 5, table_key="x")  # full: everything goes, then this one is kept
    assert memo.clears == 1 and len(memo) == 1
    assert memo.get("a", "x") is None and memo.get("c", "x") == 5
    with pytest.raises(ValueError):
        BoundedMemo("empty", 0)


def test_bounded_memo_stays_within_its_bound_under_concurrent_writers():
    memo: BoundedMemo[int, int] = BoundedMemo("race", max_entries=500)
    errors: list[BaseException] = []

    def write(offset: int) -> None:
        try:
            for value in range(5000):
                memo.put(offset * 10_000 + value, value, table_key=value % 7)
                assert len(memo) <= 500
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert 0 < len(memo) <= 500
    assert sum(len(memo.table(part)) for part in range(7)) == len(memo)


def test_service_without_a_queue_label_is_not_governed():
    service = engine_for(one_queue_objects())
    pod = gpu_pod("p1", template="two", queue=None)
    assert QUEUE_NAME_LABEL not in pod["metadata"].get("labels", {})
    from extender.state.core import parse_pod

    decision = service.filter(parse_pod(pod), ["on-demand-0"])
    assert decision.passed == ["on-demand-0"] and not decision.quota.governed
    assert service.quota_view().reserved == {}


def test_an_update_that_changes_nothing_we_read_keeps_the_quota_view():
    """Kueue rewrites a ClusterQueue's status on every admission: the parsed spec is equal, so the same quota
    context and no usage recompute (a full one walks every pod); the status itself is kept for the drift report."""
    objects = one_queue_objects()
    service = engine_for(objects)
    view = service.quota_view()
    recomputes = service.views.usage_index.full_recomputes
    (queue,) = [o for o in objects if o.get("kind") == "ClusterQueue"]
    with_status = {
        **queue,
        "status": {"flavorsUsage": [{"name": "on-demand", "resources": [{"name": "x", "total": "3"}]}]},
    }
    service.store.apply("ClusterQueue", "MODIFIED", with_status)
    after = service.quota_view()
    assert after.context is view.context
    # Kueue's own view is kept apart from the spec, for the drift report
    assert after.snapshot.queue_status["team-a"].usage == {("on-demand", "x"): Fraction(3)}
    assert service.views.usage_index.full_recomputes == recomputes
    service.store.apply("ClusterQueue", "MODIFIED", cluster_queue("team-a", {"on-demand": {"nominal": 6}}, cohort=None))
    assert service.quota_view().context is not view.context


def test_drift_report_names_an_admitted_workload_whose_pods_cannot_be_placed():
    """Kueue admitted a Job's Workload into on-demand and reserved 4 GPUs for it (ClusterQueue status); every
    on-demand GPU is allocated to a pod outside Kueue, so the Job's pod waits. /diagnostics/queues shows Kueue's
    reservation next to what the nodes hold, the difference as drift (also a metric), and names the Workload with
    the node-level reason."""
    objects = one_queue_objects(nominal=8)
    (queue,) = [o for o in objects if o.get("kind") == "ClusterQueue"]
    queue = {
        **queue,
        "status": {
            "flavorsReservation": [{"name": "on-demand", "resources": [{"name": "example.com/gpu", "total": "4"}]}],
            "flavorsUsage": [{"name": "on-demand", "resources": [{"name": "example.com/gpu", "total": "4"}]}],
            "admittedWorkloads": 1,
        },
    }
    objects = [o for o in objects if o.get("kind") != "ClusterQueue"] + [queue]
    holders = []
    for node in ("on-demand-0", "on-demand-1"):  # 4 GPUs each, all taken by pods outside Kueue
        holders.append(
            b.claim(
                f"held-{node}",
                "team-a",
                [b.exact_request("gpu", 4)],
                allocated=[("gpu", node, f"gpu-{i}") for i in range(4)],
                allocated_node=node,
                reserved_for=[(f"holder-{node}", f"uid-holder-{node}")],
            )
        )
        holders.append(
            b.pod(f"holder-{node}", "team-a", claims={"gpu": f"held-{node}"}, node_name=node, uid=f"uid-holder-{node}")
        )
    job_uid = "uid-job-train"
    pending = gpu_pod("train-0", template="two")
    pending["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job_uid}
    ]
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train",
            "namespace": "team-a",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job_uid}],
        },
        "spec": {"queueName": "team-a"},
        "status": {
            "admission": {
                "clusterQueue": "team-a",
                "podSetAssignments": [{"name": "main", "flavors": {"example.com/gpu": "on-demand"}, "count": 2}],
            },
            "conditions": [{"type": "Admitted", "status": "True"}],
        },
    }
    service = engine_for([*objects, *holders, pending, workload])
    client = create_app(service).test_client()
    report = client.get("/diagnostics/queues").get_json()
    (row,) = report["clusterQueues"][0]["resources"]
    assert (row["usage"], row["kueueReservation"], row["drift"]) == (0, 4, 4)  # holders are outside Kueue's queue
    (unplaced,) = report["admittedNotPlaced"]
    assert unplaced["workload"] == "team-a/job-train" and unplaced["pendingPods"] == ["team-a/train-0"]
    assert unplaced["flavors"] == {"example.com/gpu": "on-demand"} and unplaced["nodesPassing"] == 0
    assert "not enough free devices" in unplaced["reason"] and "(2 of 2 nodes of its flavors)" in unplaced["reason"]
    labels = (("cluster_queue", "team-a"), ("flavor", "on-demand"), ("resource", "example.com/gpu"))
    samples = metric_samples(client)
    assert samples[("dra_extender_quota_drift", labels)] == 4.0
    assert samples[("dra_extender_kueue_quota_reservation", labels)] == 4.0


def test_pods_kueue_labelled_with_their_local_queue_are_governed():
    """Kueue v0.19 labels an admitted Job's pods kueue.x-k8s.io/local-queue-name (the queue-name label may be on
    the Job only): such a pod is charged to the queue like one carrying queue-name, and the admitted Workload is
    found through the pod's owner (the Job), keeping Kueue's flavor."""
    service = engine_for(one_queue_objects(nominal=2))
    pod = gpu_pod("job-pod", template="two", queue=None)
    pod["metadata"]["labels"] = {"kueue.x-k8s.io/local-queue-name": "q"}
    from extender.state.core import parse_pod

    decision = service.filter(parse_pod(pod), ["on-demand-0", "on-demand-1"])
    assert decision.quota.governed and decision.quota.cluster_queue == "team-a"
    assert service.quota_view().reserved == {KEY: Fraction(2)}
    second = gpu_pod("job-pod-2", template="two", queue=None)
    second["metadata"]["labels"] = {"kueue.x-k8s.io/local-queue-name": "q"}
    refused = service.filter(parse_pod(second), ["on-demand-0", "on-demand-1"])
    assert not refused.passed and "quota" in refused.verdicts["on-demand-0"].reason


def test_feature_gates_default_to_kubernetes_1_37_and_reach_the_allocator_options():
    """Defaults: pkg/features/kube_features.go at v1.37.2 (every implemented DRA gate on); a gate set in the
    file reaches DecisionOptions.features, the value the allocator reads."""
    assert ExtenderConfig().decisions.features == DEFAULT_FEATURES
    assert all(DEFAULT_FEATURES.gates().values())
    config = parse_config({"features": {"DRAPartitionableDevices": False, "DRADeviceTaints": False}})
    gates = config.decisions.features.gates()
    assert not gates["DRAPartitionableDevices"] and not gates["DRADeviceTaints"]
    assert sum(gates.values()) == len(gates) - 2
    with pytest.raises(ConfigError, match="DRAPrioritizedList is GA and locked to true"):
        parse_config({"features": {"DRAPrioritizedList": False}})


def _tainted_cluster() -> list[dict]:
    taint = [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]
    devices = [b.gpu_device(i, node_name="n1", taints=taint) for i in range(2)]
    return [
        b.node("n1"),
        b.gpu_slice("n1", devices=devices),
        b.device_class(),
        b.namespace("team-a"),
        b.claim("c1", "team-a", [b.exact_request()]),
        b.pod("p1", "team-a", claims={"gpu": "c1"}),
    ]


def test_feature_gates_are_logged_at_start_and_honoured_by_filter(caplog):
    """A tainted device refuses the pod with DRADeviceTaints on (1.37) and is used with it off, as upstream's
    allocator with the gate off (allocateDevice skips the taint check); the gates are logged at start."""
    from extender.state.core import parse_pod

    objects = _tainted_cluster()
    pod = parse_pod(objects[-1])
    with caplog.at_level("INFO", logger="extender"):
        on = engine_for(objects)
    assert "DRADeviceTaints=true" in caplog.text and "DRAPrioritizedList=true" in caplog.text
    assert on.filter(pod, ["n1"]).passed == []
    caplog.clear()
    with caplog.at_level("INFO", logger="extender"):
        off = engine_for(objects, parse_config({"features": {"DRADeviceTaints": False}}))
    assert "DRADeviceTaints=false" in caplog.text
    decision = off.filter(pod, ["n1"])
    assert decision.passed == ["n1"]
