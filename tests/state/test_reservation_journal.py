"""The reservation journal (state/reservation_journal.py): a restarted extender keeps the quota its previous
process promised to pods kube-scheduler may still be binding, with nothing of them in the API server yet."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import yaml

from extender.commands.assembly import ServeSpec, SourceSpec, build_service, journal_for, journal_identity
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.reservation_journal import JournalIdentity, ReservationJournal, default_journal_path
from extender.state.reservations import ReservationLedger
from extender.state.sources import SnapshotSource
from extender.transport.app import create_app
from testkit import builders as b
from testkit.scenarios import gpu_pod
from tests.support.quota import ONE_QUEUE_KEY as KEY
from tests.support.quota import bind_two_gpus, one_queue_objects

NODES = ["on-demand-0", "on-demand-1"]


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def service_with(path: Path, objects: list[dict]) -> SchedulingService:
    """A started service over `objects` whose ledger is journaled at `path` (as `serve` with a live source)."""
    text = yaml.safe_dump_all(objects)
    service = SchedulingService(SnapshotSource(text=text), ExtenderConfig(), journal=ReservationJournal(path))
    service.start()
    return service


def test_the_ledger_survives_a_restart_with_the_ttl_it_had_left(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    clock, wall = Clock(), Clock(5_000.0)
    journal = ReservationJournal(path, wall_clock=wall)
    ledger = ReservationLedger(60, clock=clock, sink=journal)
    ledger.reserve("uid-a", "team-a/a", "team-a", {KEY: Fraction(2)})
    ledger.reserve("uid-b", "team-a/b", "team-a", {KEY: Fraction(1, 2)})
    clock.now += 50
    wall.now += 50
    ledger.reserve("uid-c", "team-a/c", "team-a", {KEY: Fraction(1)}, workload="team-a/job-c")
    ledger.confirm("uid-c", "on-demand-1")
    ledger.release("uid-b")
    assert journal.writes == 5
    wall.now += 20  # the new process starts 20 s later: a's TTL ran out, c has 40 s left
    loaded = ReservationJournal(path, wall_clock=wall).load()
    assert [(r.pod_uid, r.node, round(r.remaining_seconds), r.workload) for r in loaded] == [
        ("uid-c", "on-demand-1", 40, "team-a/job-c")  # the admitted Workload whose hold it replaces, too
    ]
    fresh = ReservationLedger(60, clock=Clock(7.0))
    for item in loaded:
        fresh.restore(item.pod_uid, item.pod_key, item.cluster_queue, item.charges, item.remaining_seconds)
    assert fresh.totals() == {KEY: Fraction(1)}
    assert fresh.get("uid-c").expires == 47.0


def test_a_restarted_service_holds_what_the_previous_one_promised(tmp_path: Path) -> None:
    """The old window: kube-scheduler assumed `first` on our verdict and is still binding it (nothing in the API);
    the extender restarts. The new process must refuse `second` until `first` shows bound with its allocation."""
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=2)
    first = gpu_pod("first", template="two")
    old = service_with(path, [*objects, first])
    assert old.filter(parse_pod(first), NODES).passed == NODES
    assert old.quota_view().reserved == {KEY: 2}

    new = service_with(path, [*objects, first])  # the same API objects: nothing shows the binding
    assert new.restored_reservations == 1
    assert new.quota_view().reserved == {KEY: 2}
    metrics = create_app(new).test_client().get("/metrics").get_data(as_text=True)
    assert "dra_extender_reservations_restored 1.0" in metrics
    second = new.filter(parse_pod(gpu_pod("second", template="two")), NODES)
    assert not second.passed and {v.category for v in second.verdicts.values()} == {"quota-exhausted"}

    # PreBind writes the allocation, then the binding shows: usage takes over, the restored reservation goes.
    bind_two_gpus(new.store, first, NODES[0])
    view = new.quota_view()
    assert view.usage == {KEY: 2} and view.reserved == {}
    assert ReservationJournal(path).load() == []


def test_an_unreadable_journal_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    for content in (b"not json", b'{"version": 99, "reservations": []}', b'{"version": 1}'):
        path.write_bytes(content)
        assert ReservationJournal(path).load() == []
    service = service_with(path, one_queue_objects())
    assert service.restored_reservations == 0
    assert ReservationJournal(tmp_path / "absent.json").load() == []


def test_a_journal_that_cannot_be_written_does_not_stop_the_verbs(tmp_path: Path) -> None:
    blocked = tmp_path / "no-such-dir" / "journal.json"
    service = service_with(blocked, one_queue_objects(nominal=2))
    assert service.filter(parse_pod(gpu_pod("first", template="two")), NODES).passed == NODES
    assert service.journal is not None and service.journal.writes == 0


def test_serve_with_a_live_source_journals_per_listen_address_and_cluster() -> None:
    """auto: one file per listen address and API server in the temporary directory; other commands and sources
    reserve nothing worth keeping."""
    config = ExtenderConfig()
    serve = ServeSpec(listen="127.0.0.1:8888")
    journal = journal_for(config, serve)
    assert journal is not None and journal.path == default_journal_path("127.0.0.1:8888")
    assert journal.path.name == "dra-extender-reservations-127.0.0.1_8888.json"
    assert default_journal_path("127.0.0.1:8889") != journal.path
    # and per cluster: another cluster's extender on the same port keeps its own promises apart
    ours = journal_for(config, serve, cluster="https://127.0.0.1:6443")
    theirs = journal_for(config, serve, cluster="https://127.0.0.1:7443")
    assert ours is not None and theirs is not None and ours.path != theirs.path
    assert ours.path.name == "dra-extender-reservations-127.0.0.1_8888-127.0.0.1_6443.json"
    snapshot_served = build_service(SourceSpec(), config, serve=serve, start=False)  # the embedded demo
    assert snapshot_served.journal is None  # a snapshot source
    assert journal_for(config, None) is None  # not `serve`
    off = ExtenderConfig(reservations=type(config.reservations)(journal=""))
    assert journal_for(off, serve) is None


def test_a_torn_last_line_is_skipped_and_the_file_stays_small(tmp_path: Path) -> None:
    """One line per change, appended; a process killed mid-write leaves a torn last line, skipped on replay. The
    file is rewritten as the live records once the lines outnumber them (twice, plus COMPACT_SLACK)."""
    path = tmp_path / "journal.json"
    journal = ReservationJournal(path)
    ledger = ReservationLedger(60, sink=journal)
    for i in range(600):
        ledger.reserve(f"uid-{i % 3}", f"team-a/p{i % 3}", "team-a", {KEY: Fraction(1)})
    assert len(path.read_bytes().splitlines()) < 600, "compacted"
    with path.open("ab") as file:
        file.write(b'{"op": "put", "podUID": "uid-torn", "po')
    restarted = ReservationJournal(path)  # the next process
    loaded = restarted.load()
    assert sorted(r.pod_uid for r in loaded) == ["uid-0", "uid-1", "uid-2"]
    fresh = ReservationLedger(60, sink=restarted)
    for item in loaded:
        fresh.restore(item.pod_uid, item.pod_key, item.cluster_queue, item.charges, item.remaining_seconds)
    fresh.release("uid-1")
    assert path.read_bytes().count(b"uid-torn") == 0, "its first write rewrote the file whole"
    assert sorted(r.pod_uid for r in ReservationJournal(path).load()) == ["uid-0", "uid-2"]


# --- restored promises whose pod is gone -------------------------------------------------------------------


def promised_unseen(path: Path, objects: list[dict], pod: dict) -> None:
    """The old process let `pod` through before its own watch showed it (kube-scheduler's informer is ahead of
    ours): the journal holds the reservation not marked seen."""
    old = service_with(path, objects)
    assert old.filter(parse_pod(pod), NODES).passed == NODES
    (held,) = old.reservations.all()
    assert not held.seen


def test_a_restored_reservation_of_a_pod_deleted_meanwhile_is_let_go_at_the_first_complete_view(tmp_path: Path) -> None:
    """The pod was deleted while the extender was down: the new process's first lists do not hold it. Held until
    its TTL, the restored reservation would refuse `second` ("quota exhausted, available 0") for a minute."""
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=2)
    promised_unseen(path, objects, gpu_pod("first", template="two"))
    new = service_with(path, objects)  # the pod is gone from the API
    assert new.restored_reservations == 1
    assert new.quota_view().reserved == {}
    assert new.released_reservations == {"deleted": 1}
    assert new.filter(parse_pod(gpu_pod("second", template="two")), NODES).passed == NODES


def test_a_restored_reservation_of_a_pod_recreated_under_its_name_is_let_go(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=2)
    first = gpu_pod("first", template="two")
    promised_unseen(path, objects, first)
    again = gpu_pod("first", template="two")
    again["metadata"]["uid"] = "another-" + first["metadata"]["uid"]
    new = service_with(path, [*objects, again])
    assert new.quota_view().reserved == {}
    assert new.filter(parse_pod(again), NODES).passed == NODES  # the new pod is a pod like any other


def test_a_restored_reservation_confirmed_on_one_node_and_bound_to_another_is_let_go(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=2)
    first = gpu_pod("first", template="two")
    old = service_with(path, [*objects, first])
    assert old.filter(parse_pod(first), NODES).passed == NODES
    old.reservations.confirm(first["metadata"]["uid"], NODES[0])
    elsewhere = gpu_pod("first", template="two", node_name=NODES[1])  # claims not allocated in the view yet
    elsewhere["metadata"]["uid"] = first["metadata"]["uid"]
    new = service_with(path, [*objects, elsewhere])
    new.quota_view()
    assert new.released_reservations == {"bound elsewhere": 1}


def test_a_restored_reservation_is_kept_while_the_view_is_incomplete_and_judged_once_it_is(tmp_path: Path) -> None:
    """Absent from a view still listing says nothing; the first complete one decides, though the pod's key
    never shows in a change."""
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=2)
    promised_unseen(path, objects, gpu_pod("first", template="two"))
    new = service_with(path, objects)
    new.store.set_synced(False)
    new._reconciled_version = -1  # the first reconcile, as in a process whose lists are still coming
    assert new.quota_view().reserved == {KEY: 2}
    new.store.set_synced(True)
    new.store.apply("Node", "MODIFIED", b.node(NODES[0], {"example.com/capacity-type": "on-demand"}))
    assert new.quota_view().reserved == {}


def test_restored_reservations_never_consumed_are_counted_for_an_alert(tmp_path: Path) -> None:
    """A restored reservation whose pod still exists but never binds is let go at its TTL: counted."""
    clock = Clock()
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=2)
    first = gpu_pod("first", template="two")
    old = service_with(path, [*objects, first])
    assert old.filter(parse_pod(first), NODES).passed == NODES
    text = yaml.safe_dump_all([*objects, first])
    new = SchedulingService(SnapshotSource(text=text), ExtenderConfig(), journal=ReservationJournal(path), clock=clock)
    new.start()
    new.quota_view()
    metrics = create_app(new).test_client().get("/metrics").get_data(as_text=True)
    assert "dra_extender_reservations_restored_held 1.0" in metrics
    clock.now += 61
    new.quota_view()
    metrics = create_app(new).test_client().get("/metrics").get_data(as_text=True)
    assert "dra_extender_reservations_restored_held 0.0" in metrics
    assert 'dra_extender_reservations_restored_released_total{reason="expired"} 1.0' in metrics


# --- whose journal -----------------------------------------------------------------------------------------


def test_a_journal_of_another_cluster_or_scheduler_is_ignored_with_a_log_line(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, "extender.state.reservation_journal")
    path = tmp_path / "journal.json"
    ours = JournalIdentity(cluster="uid-of-kube-system", scheduler="kube-system/kube-scheduler", config="c1")
    ledger = ReservationLedger(60, sink=ReservationJournal(path, identity=ours))
    ledger.reserve("uid-a", "team-a/a", "team-a", {KEY: Fraction(2)})
    assert len(ReservationJournal(path, identity=ours).load()) == 1
    assert len(ReservationJournal(path, identity=replace(ours, config="c2")).load()) == 1  # a config change
    assert "another extender configuration" in caplog.text
    for foreign in (replace(ours, cluster="uid-of-another"), replace(ours, scheduler="kube-system/other")):
        caplog.clear()
        assert ReservationJournal(path, identity=foreign).load() == []
        assert "ignoring the reservation journal" in caplog.text and "it belongs to" in caplog.text
    # a journal that names no cluster (written before it did, or by a process that could not tell) is foreign
    path.write_bytes(b'{"version": 3}\n' + path.read_bytes().split(b"\n", 1)[1])
    assert ReservationJournal(path, identity=ours).load() == []
    assert len(ReservationJournal(path).load()) == 1  # a process that cannot tell its cluster takes it


def test_the_journal_header_names_the_cluster_the_scheduler_and_the_config(tmp_path: Path) -> None:
    config = ExtenderConfig()
    identity = journal_identity(config, api_config=None)
    assert identity.scheduler == "kube-system/dra-quota-scheduler" and len(identity.config) == 16
    assert identity.cluster == ""  # no API server to ask
    other = ExtenderConfig(reservations=type(config.reservations)(ttl_seconds=30))
    assert journal_identity(other, api_config=None).config != identity.config
    path = tmp_path / "journal.json"
    journal = ReservationJournal(path, identity=replace(identity, cluster="uid-1"))
    ReservationLedger(60, sink=journal).reserve("uid-a", "team-a/a", "team-a", {KEY: Fraction(1)})
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header == {
        "version": 3,
        "cluster": "uid-1",
        "scheduler": "kube-system/dra-quota-scheduler",
        "config": identity.config,
    }


def test_a_restored_reservation_is_not_let_go_by_a_view_built_before_the_first_lists(tmp_path: Path) -> None:
    """A /metrics scrape or a diagnostics call builds a quota view while the new process is still listing: a
    promise seen by the previous process, whose pod the incomplete view does not hold yet, stays held."""
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=2)
    first = gpu_pod("first", template="two")
    old = service_with(path, [*objects, first])
    assert old.filter(parse_pod(first), NODES).passed == NODES  # seen: the old view held the pod
    new = service_with(path, objects)  # the pods are not listed yet
    new.store.set_synced(False)
    new._reconciled_version = -1
    metrics = create_app(new).test_client().get("/metrics").get_data(as_text=True)
    assert "dra_extender_reservations_restored_held 1.0" in metrics
    assert new.quota_view().reserved == {KEY: 2}
    new.store.apply("Pod", "ADDED", first)  # the pod list arrives
    new.store.set_synced(True)
    assert new.quota_view().reserved == {KEY: 2}
    second = new.filter(parse_pod(gpu_pod("second", template="two")), NODES)
    assert not second.passed


def test_a_filter_for_a_pod_the_view_has_seen_deleted_holds_nothing_after_the_next_reconcile(tmp_path: Path) -> None:
    """kube-scheduler's informer behind ours: it asks about `b` after our view showed `b` deleted. Absent from
    the view, `b` looked like a pod our watch had not shown yet and its reservation stayed for the TTL (the
    restart-window e2e's rounds that waited 60 s for the extender to let go of the round's quota)."""
    objects = one_queue_objects(nominal=2)
    b_pod = gpu_pod("b", template="two")
    service = service_with(tmp_path / "journal.json", [*objects, b_pod])
    assert service.quota_view().reserved == {}
    service.store.apply("Pod", "DELETED", b_pod)
    service.quota_view()
    assert service.filter(parse_pod(b_pod), NODES).passed == NODES  # asked about after its deletion
    assert service.quota_view().reserved == {}
    assert service.released_reservations == {"deleted": 1}
    assert service.filter(parse_pod(gpu_pod("c", template="two")), NODES).passed == NODES
