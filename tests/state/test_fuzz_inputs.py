"""Hostile input never escapes as anything but the parser's own error.

Every entry point that reads data from outside the process is fuzzed with hypothesis:

- the snapshot loader (`load_snapshot_text`): loads, or raises `SnapshotError`; a loaded store also
  materialises a snapshot and answers a what-if decision for the demo pod without raising;
- the wire parser (`parse_extender_args`, `parse_binding_args`): only `WireError`;
- the Pod parser (`parse_pod`): only `ObjectError`;
- CEL selectors (`compile_selector`): only `SelectorError`; `matches` on example devices (and on devices
  parsed from hostile ResourceSlices) returns a bool or raises `SelectorError`.

Inputs are valid objects (the embedded demo cluster, a Workload, a pod) with a few hostile mutations each:
wrong types anywhere, deep nesting, huge numbers, odd quantities ("1e999", "0x10", "-0"), unicode and lone
surrogates, YAML-only values (dates, bytes, sets), duplicate keys differing in letter case. The examples are
derandomized so CI is reproducible; FUZZ_EXAMPLES=N runs N random examples per test instead. Run with -s to
see how many examples each property checked.
"""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from importlib import resources
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from extender.decisions.devices.cel import SelectorError, compile_selector
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.dra.devices import Attribute, Device
from extender.state.errors import ObjectError
from extender.state.snapshot_file import SnapshotError, iter_documents, load_snapshot_text
from extender.state.sources import SnapshotSource
from extender.transport.wire import WireError, parse_binding_args, parse_extender_args
from testkit import builders as b
from tests.support.fuzz import ODD_STRINGS, fuzz_settings, hostile_values, mutate

pytestmark = pytest.mark.slow  # fuzzing: hundreds of generated inputs per test

EXAMPLES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def report_examples():
    yield
    print("\nfuzz examples checked:", dict(sorted(EXAMPLES.items())), "total", sum(EXAMPLES.values()))


# --- the demo cluster as the seed corpus ----------------------------------------------------------------------

DEMO_TEXT = resources.files("extender").joinpath("demo/cluster.yaml").read_text(encoding="utf-8")
DEMO_DOCUMENTS = [document for _, document in iter_documents(DEMO_TEXT)]
WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {
        "name": "pod-train-0-1",
        "namespace": "team-a",
        "uid": "wl-uid",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": "pod-uid", "controller": True}
        ],
    },
    "spec": {"queueName": "gpus", "podSets": [{"name": "main", "count": 1}]},
    "status": {
        "admission": {
            "clusterQueue": "team-a",
            "podSetAssignments": [
                {"name": "main", "flavors": {"example.com/gpu": "on-demand"}, "resourceUsage": {"example.com/gpu": "2"}}
            ],
        },
        "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
    },
}
SEED_DOCUMENTS = [*DEMO_DOCUMENTS, WORKLOAD]
DEMO_POD = yaml.safe_load(resources.files("extender").joinpath("demo/pod-two-gpus.yaml").read_text(encoding="utf-8"))


def test_seed_corpus_loads():
    store = load_snapshot_text(DEMO_TEXT + "---\n" + yaml.safe_dump(WORKLOAD))
    snapshot = store.snapshot()
    assert len(snapshot.nodes) == 4 and len(snapshot.workloads) == 1
    kinds = {document["kind"] for document in SEED_DOCUMENTS}
    assert {"Node", "Pod", "ResourceSlice", "ResourceClaim", "ClusterQueue", "Cohort", "Workload"} <= kinds


def render(documents: list[Any], form: str) -> str | None:
    """The documents as a snapshot file in one of the forms the loader reads; None when the form cannot hold
    them (JSON has no dates, NaN or integers past 64 bits)."""
    try:
        if form == "yaml":
            return yaml.safe_dump_all(documents, allow_unicode=True, sort_keys=False)
        if form == "json-list":
            return orjson.dumps({"apiVersion": "v1", "kind": "List", "items": documents}).decode()
        return orjson.dumps(documents).decode()
    except (TypeError, orjson.JSONEncodeError, yaml.YAMLError, UnicodeEncodeError, RecursionError):
        return None


def explain_on(store_text: str) -> None:
    """What a loaded snapshot must also survive: materialising the snapshot and a what-if decision."""
    engine = SchedulingService(SnapshotSource(text=store_text), ExtenderConfig())
    engine.start()
    snapshot = engine.snapshot()
    engine.explain(parse_pod(DEMO_POD), sorted(snapshot.nodes))


@fuzz_settings(300)
@given(st.data())
def test_snapshot_loader_loads_or_raises_snapshot_error(data):
    documents = copy.deepcopy(SEED_DOCUMENTS)
    form = data.draw(st.sampled_from(["yaml", "yaml", "json-list", "json-array"]), label="form")
    targets = data.draw(st.lists(st.integers(0, len(documents) - 1), min_size=1, max_size=3), label="targets")
    for index in targets:
        documents[index] = mutate(data, documents[index], yaml_values=form == "yaml")
    text = render(documents, form)
    if text is None:
        text = render(documents, "yaml")
    if text is None:
        return
    EXAMPLES["snapshot loader"] += 1
    try:
        store = load_snapshot_text(text)
    except SnapshotError:
        EXAMPLES["snapshot loader: SnapshotError"] += 1
        return
    store.snapshot()
    EXAMPLES["snapshot loader: loaded"] += 1
    explain_on(text)


RAW_TEXTS = [
    "[" * 100_000 + "]" * 100_000,
    "{" * 5_000,
    "kind: Node\nmetadata:\n  name: n\n  labels: " + "[" * 20_000 + "]" * 20_000,
    "kind: Node\nmetadata:\n  name: n\n  labels: " + "{a: " * 5_000 + "1" + "}" * 5_000,
    '{"kind": "Node", "metadata": {"name": "n", "labels": ' + "[" * 2_000 + "]" * 2_000 + "}}",
    "kind: Node\nmetadata: &m\n  name: n\n  labels: *m\n",
    "kind: Node\nmetadata:\n  name: n\n  labels: &l [*l]\n",
    "kind: Pod\nmetadata: &m {name: p, namespace: a, labels: {x: y}}\nspec: &s {resourceClaims: [*s]}\n",
    "a: &a [x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: &d [*c, *c, *c, *c]\n"
    "kind: Node\nmetadata: {name: *d}",
    "kind: Node\nmetadata: {name: !!binary aGVsbG8=}\n",
    "kind: Node\nmetadata: {name: 2001-12-14}\n",
    "kind: Node\nmetadata: !!set {name, labels}\n",
    "kind: Node\nmetadata: !!omap [name: n]\n",
    "kind: Node\nmetadata: {name: !!python/object:os.system x}\n",
    "kind: Node\nmetadata: {name: n, name: m, Name: o}\n",
    'kind: Node\nmetadata: {name: "\\ud800"}\n',
    "kind: ResourceSlice\napiVersion: resource.k8s.io/v1\nmetadata: {name: s}\nspec: {driver: d, nodeName: n, "
    "pool: {name: p, generation: 1e999, resourceSliceCount: 0x10}, "
    "devices: [{name: d, capacity: {m: {value: 1e999}}}]}",
    "kind: List\nitems: [1, 2]\n",
    "kind: NodeList\nitems: {}\n",
    "- kind: Node\n- 5\n",
    "\x00\x01\x02",
    "\ufeffkind: Node\nmetadata: {name: n}\n",
    "kind: [Node]\n",
    "kind: Node\napiVersion: [v1]\nmetadata: {name: n}\n",
    "kind: ClusterQueue\napiVersion: kueue.x-k8s.io\nmetadata: {name: q}\n",
    "kind: ClusterQueue\napiVersion: kueue.x-k8s.io/v1beta2/extra\nmetadata: {name: q}\n",
]


@pytest.mark.parametrize("text", RAW_TEXTS, ids=range(len(RAW_TEXTS)))
def test_snapshot_loader_hand_picked_texts(text):
    EXAMPLES["snapshot loader (hand-picked)"] += 1
    try:
        load_snapshot_text(text).snapshot()
    except SnapshotError:
        return
    explain_on(text)


@pytest.mark.parametrize("text", RAW_TEXTS[:8], ids=range(8))
def test_snapshot_loader_without_libyaml(monkeypatch, text):
    """The pure-Python YAML loader (no libyaml) recurses on deep nesting: still only SnapshotError."""
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    EXAMPLES["snapshot loader (hand-picked, pure-Python YAML)"] += 1
    with contextlib.suppress(SnapshotError):
        load_snapshot_text(text).snapshot()


@fuzz_settings(200)
@given(st.text(max_size=400))
def test_snapshot_loader_on_arbitrary_text(text):
    EXAMPLES["snapshot loader (arbitrary text)"] += 1
    with contextlib.suppress(SnapshotError):
        load_snapshot_text(text).snapshot()


# --- the wire format and the Pod parser --------------------------------------------------------------------------

VALID_ARGS = {"Pod": DEMO_POD, "NodeNames": ["gpu-od-1", "gpu-od-2"], "Nodes": None}
VALID_NODES_ARGS = {"Pod": DEMO_POD, "Nodes": {"items": [b.node("gpu-od-1"), b.node("gpu-spot-1")]}, "NodeNames": None}
VALID_BINDING = {"PodName": "train-1", "PodNamespace": "team-a", "PodUID": "u", "Node": "gpu-od-1"}


@fuzz_settings(400)
@given(st.data())
def test_wire_parser_raises_only_wire_error(data):
    seed = data.draw(st.sampled_from([VALID_ARGS, VALID_NODES_ARGS, None]), label="seed")
    body = data.draw(hostile_values) if seed is None else mutate(data, seed)
    max_nodes = data.draw(st.sampled_from([0, 1, 10_000]), label="max_nodes")
    EXAMPLES["wire parser"] += 1
    try:
        args = parse_extender_args(body, max_nodes=max_nodes)
    except WireError as error:
        assert str(error)
        return
    assert all(isinstance(name, str) for name in args.node_names)
    assert len(args.node_names) <= max_nodes


@fuzz_settings(200)
@given(st.data())
def test_binding_parser_raises_only_wire_error(data):
    body = mutate(data, VALID_BINDING) if data.draw(st.booleans()) else data.draw(hostile_values)
    EXAMPLES["binding parser"] += 1
    try:
        args = parse_binding_args(body)
    except WireError:
        return
    assert args.pod_name and args.pod_namespace and args.node


@fuzz_settings(400)
@given(st.data())
def test_pod_parser_raises_only_object_error(data):
    EXAMPLES["pod parser"] += 1
    seed = data.draw(st.sampled_from([DEMO_POD, *(d for d in DEMO_DOCUMENTS if d["kind"] == "Pod")]), label="pod")
    try:
        pod = parse_pod(mutate(data, seed, yaml_values=True))
    except ObjectError as error:
        assert error.describe()
        return
    assert isinstance(pod.name, str) and isinstance(pod.namespace, str)
    assert all(isinstance(ref.name, str) for ref in pod.claims)


# --- CEL selectors ------------------------------------------------------------------------------------------------

REAL_SELECTORS = [
    "device.driver == 'gpu.example.com'",
    "device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'",
    "device.attributes['gpu.example.com'].index < 4",
    "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "device.attributes['gpu.example.com'].driverVersion.isGreaterThan(semver('0.9.0'))",
    "'uuid' in device.attributes['gpu.example.com'] && device.attributes['gpu.example.com'].uuid.startsWith('gpu')",
    "device.allowMultipleAllocations == false",
    "has(device.attributes['gpu.example.com'].missing) || device.attributes['gpu.example.com'].index % 2 == 0",
    "device.capacity['gpu.example.com'].compute.isLessThan(quantity('1k'))",
    "['a', 'gpu.example.com'].exists(x, x == device.driver)",
]
CEL_TOKENS = [
    "device",
    ".",
    "driver",
    "attributes",
    "capacity",
    "['gpu.example.com']",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ",",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "&&",
    "||",
    "!",
    "-",
    "+",
    "*",
    "/",
    "%",
    "?",
    ":",
    " in ",
    "has(",
    "quantity(",
    "semver(",
    "isGreaterThan(",
    "compareTo(",
    "asApproximateFloat()",
    "sign()",
    "isInteger()",
    "'1e999'",
    "'0x10'",
    "'-0'",
    "'1Ei'",
    "'1.0.0'",
    "'\u00ff'",
    "'\\u0000'",
    "'\\xff'",
    "'''",
    '"',
    "b'\\xff'",
    "1",
    "0",
    "-9223372036854775808",
    "9223372036854775807",
    "18446744073709551615u",
    "1e999",
    "0x10",
    "1.5",
    "true",
    "false",
    "null",
    "size(",
    "matches(",
    "'(a*)*b'",
    "exists(x,",
    "all(x,",
    "map(x,",
    "filter(x,",
    "x",
    "dyn(",
    "type(",
    "int(",
    "uint(",
    "double(",
    "string(",
    "bytes(",
    "timestamp(",
    "duration(",
    "'1h'",
    "_&&_",
    "index",
    "model",
    "memory",
    "uuid",
    "\u202e",
    "💥",
    "\ud800",
]
cel_token_soup = st.lists(st.sampled_from(CEL_TOKENS), max_size=25).map("".join)


def cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


cel_strings = st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=8)).map(cel_string)
ATTRIBUTES = "device.attributes['gpu.example.com']"
CAPACITY = "device.capacity['gpu.example.com']"
cel_str_values = st.one_of(
    st.sampled_from(["device.driver", f"{ATTRIBUTES}.uuid", f"{ATTRIBUTES}.model", f"{ATTRIBUTES}.missing"]),
    cel_strings,
)
cel_int_values = st.one_of(
    st.just(f"{ATTRIBUTES}.index"),
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["-9223372036854775808", "9223372036854775807", "0", "-0"]),
)
cel_quantities = st.one_of(
    st.sampled_from([f"{CAPACITY}.memory", f"{CAPACITY}.compute", f"{CAPACITY}.missing"]),
    cel_strings.map(lambda text: f"quantity({text})"),
    st.sampled_from(["'1Gi'", "'0'", "'-1'", "'1e3'", "'100m'", "'1Ei'", "'9223372036854775807'"]).map(
        lambda text: f"quantity({text})"
    ),
)
cel_versions = st.one_of(
    st.just(f"{ATTRIBUTES}.driverVersion"),
    cel_strings.map(lambda text: f"semver({text})"),
    st.sampled_from(["'1.0.0'", "'0.0.1-alpha'", "'1.0.0+build'", "'v1'"]).map(lambda text: f"semver({text})"),
)
cel_comparisons = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
cel_atoms = st.one_of(
    st.builds(lambda a, op, b: f"{a} {op} {b}", cel_str_values, st.sampled_from(["==", "!="]), cel_str_values),
    st.builds(
        lambda a, method, b: f"{a}.{method}({b})",
        cel_str_values,
        st.sampled_from(["startsWith", "endsWith", "contains", "matches"]),
        cel_strings,
    ),
    st.builds(lambda a, op, b: f"{a} {op} {b}", cel_int_values, cel_comparisons, cel_int_values),
    st.builds(
        lambda a, op, b, c: f"{a} {op} {b} == {c}",
        cel_int_values,
        st.sampled_from("+-*/%"),
        cel_int_values,
        cel_int_values,
    ),
    st.builds(lambda a, b, op: f"{a}.compareTo({b}) {op} 0", cel_quantities, cel_quantities, cel_comparisons),
    st.builds(
        lambda a, method, b: f"{a}.{method}({b})",
        cel_quantities,
        st.sampled_from(["isGreaterThan", "isLessThan"]),
        cel_quantities,
    ),
    st.builds(
        lambda a, op, b: f"{a}.{op}({b}).isInteger()", cel_quantities, st.sampled_from(["add", "sub"]), cel_quantities
    ),
    st.builds(lambda a, b: f"{a}.asInteger() > {b}", cel_quantities, cel_int_values),
    st.builds(lambda a: f"sign({a}) == 1", cel_quantities),  # a global function upstream, not a method
    st.builds(lambda a: f"{a}.asApproximateFloat() > 0.5", cel_quantities),
    st.builds(
        lambda a, method, b: f"{a}.{method}({b})",
        cel_versions,
        st.sampled_from(["isGreaterThan", "isLessThan"]),
        cel_versions,
    ),
    st.builds(lambda a, b: f"{a}.compareTo({b}) == 0", cel_versions, cel_versions),
    st.builds(lambda a, b: f"{a}.major() == {b}", cel_versions, cel_int_values),
    st.sampled_from(["index", "uuid", "model", "driverVersion", "missing"]).map(lambda n: f"has({ATTRIBUTES}.{n})"),
    cel_strings.map(lambda text: f"{text} in {ATTRIBUTES}"),
    st.sampled_from(["device.allowMultipleAllocations", "true", "false", "null", "[] == []", "{} == {}"]),
    st.builds(lambda a, op, b: f"{a} {op} {b}", cel_str_values, cel_comparisons, cel_int_values),  # type errors
)
cel_expressions = st.recursive(
    cel_atoms,
    lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"({a}) {op} ({b})", inner, st.sampled_from(["&&", "||"]), inner),
        inner.map(lambda e: f"!({e})"),
        st.builds(lambda a, b, c: f"({a}) ? ({b}) : ({c})", inner, inner, inner),
        st.builds(lambda a, e: f"[{a}].exists(x, {e})", cel_int_values, inner),
    ),
    max_leaves=6,
)


def mutate_text(data: st.DataObject, text: str) -> str:
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(text)))
        action = data.draw(st.sampled_from(["insert", "delete", "repeat"]))
        if action == "insert":
            text = text[:position] + data.draw(st.sampled_from(CEL_TOKENS)) + text[position:]
        elif action == "delete":
            text = text[:position] + text[position + data.draw(st.integers(1, 5)) :]
        else:
            text = text[:position] * data.draw(st.integers(1, 400)) + text[position:]
    return text


def example_devices() -> list[Device]:
    store = load_snapshot_text(yaml.safe_dump_all([b.node("n1"), b.gpu_slice("n1", 2)]))
    devices = [device for pool in store.snapshot().pools.values() for device in pool.devices]
    driver = b.DRIVER

    def odd(name: str, attributes: dict, capacity: dict, device_driver: str = driver) -> Device:
        return Device(
            key=(device_driver, "n1", name),
            name=name,
            driver=device_driver,
            pool="n1",
            slice_name="s",
            attributes={f"{driver}/{k}": Attribute(kind, v) for k, (kind, v) in attributes.items()},
            capacity={f"{driver}/{k}": v for k, v in capacity.items()},
        )

    from fractions import Fraction

    devices += [
        odd("huge", {"index": ("int", 2**70), "model": ("string", "\ud800")}, {"memory": Fraction(10**40)}),
        odd(
            "odd",
            {"driverVersion": ("version", "1.0.0-\u00ff"), "index": ("int", -(2**63))},
            {"memory": Fraction(-1, 3)},
        ),
        odd("bad-version", {"driverVersion": ("version", "999999999999999999999999.0.0")}, {}),
        odd("unicode", {"model": ("string", "\uff27\uff30\uff35💥")}, {"memory": Fraction(1, 10**30)}, "\u202egpu"),
    ]
    return devices


DEVICES = example_devices()


def check_selector(expression: str) -> None:
    try:
        selector = compile_selector(expression)
    except SelectorError as error:
        assert error.phase == "compile"
        EXAMPLES["CEL: compile errors"] += 1
        return
    EXAMPLES["CEL: compiled"] += 1
    for device in DEVICES:
        try:
            assert selector.matches(device) in (True, False)
        except SelectorError as error:
            assert error.phase == "runtime"


@pytest.mark.parametrize("expression", REAL_SELECTORS)
def test_real_selectors_match_the_builder_devices(expression):
    assert compile_selector(expression).matches(DEVICES[0])


@fuzz_settings(300)
@given(st.data())
def test_cel_selectors_raise_only_selector_error(data):
    source = data.draw(st.sampled_from(["grammar", "grammar", "soup", "mutated", "text"]), label="source")
    if source == "grammar":
        expression = data.draw(cel_expressions)
    elif source == "soup":
        expression = data.draw(cel_token_soup)
    elif source == "mutated":
        expression = mutate_text(data, data.draw(st.sampled_from(REAL_SELECTORS)))
    else:
        expression = data.draw(st.text(max_size=60))
    EXAMPLES["CEL selectors"] += 1
    check_selector(expression)


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 6000 + "true" + ")" * 6000,
        "!" * 10_000 + "true",
        "true" + " && true" * 1_000,
        "device.attributes" + "['a']" * 1_000 + " == 1",
        "\ud800 == 1",
        "'\udc80' == device.driver",
        "device.driver == '" + "x" * 10_300 + "'",
        "device.driver.matches('" + "(" * 2_000 + "')",
        "device.attributes['gpu.example.com'].index == 9223372036854775808",
        "quantity('1e999').isGreaterThan(quantity('1'))",
        "quantity('0x10').sign() == 1",
        "semver('1.0.0-\u00ff').major() == 1",
        "[1,2,3].map(x, [1,2,3].map(y, [1,2,3].map(z, x*y*z))).size() > 0",
        "",
        " ",
        "\x00",
    ],
)
def test_hand_picked_selectors(expression):
    EXAMPLES["CEL selectors (hand-picked)"] += 1
    check_selector(expression)
