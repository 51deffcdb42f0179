"""The reservation journal (state/reservation_journal.py): a restarted extender keeps the quota its previous
process promised to pods kube-scheduler may still be binding, with nothing of them in the API server yet."""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

import yaml

from extender import cli
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.reservation_journal import ReservationJournal, default_journal_path
from extender.state.reservations import ReservationLedger
from extender.state.sources import SnapshotSource
from extender.transport.app import create_app
from testkit import builders as b
from tests.support.quota import ONE_QUEUE_KEY as KEY
from tests.support.quota import one_queue_objects
from tests.support.scenarios import gpu_pod

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
    uid = first["metadata"]["uid"]
    claim = b.claim(
        "first-gpu",
        "team-a",
        [b.exact_request("gpu", 2)],
        owner_uid=uid,
        allocated=[("gpu", NODES[0], "gpu-0"), ("gpu", NODES[0], "gpu-1")],
        allocated_node=NODES[0],
        reserved_for=[("first", uid)],
    )
    new.store.apply("ResourceClaim", "ADDED", claim)
    bound = gpu_pod("first", template="two", claim_statuses={"gpu": "first-gpu"}, node_name=NODES[0])
    bound["metadata"]["uid"] = uid
    new.store.apply("Pod", "MODIFIED", bound)
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
    serve = argparse.Namespace(command="serve", listen="127.0.0.1:8888")
    journal = cli._journal(serve, config, binder=object())
    assert journal is not None and journal.path == default_journal_path("127.0.0.1:8888")
    assert journal.path.name == "dra-extender-reservations-127.0.0.1_8888.json"
    assert default_journal_path("127.0.0.1:8889") != journal.path
    # and per cluster: another cluster's extender on the same port keeps its own promises apart
    ours = cli._journal(serve, config, binder=object(), cluster="https://127.0.0.1:6443")
    theirs = cli._journal(serve, config, binder=object(), cluster="https://127.0.0.1:7443")
    assert ours is not None and theirs is not None and ours.path != theirs.path
    assert ours.path.name == "dra-extender-reservations-127.0.0.1_8888-127.0.0.1_6443.json"
    assert cli._journal(serve, config, binder=None) is None  # a snapshot source
    assert cli._journal(argparse.Namespace(command="explain", listen=""), config, binder=object()) is None
    off = ExtenderConfig(reservations=type(config.reservations)(journal=""))
    assert cli._journal(serve, off, binder=object()) is None


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
