"""The web view in a real browser (headless Chromium): pages, links, the what-if form, screenshots.

Against the embedded demo cluster (with the demo pods filtered, as kube-scheduler would) and a generated
1000-node cluster. The server is the diagnostics app on 127.0.0.1, as the diagnostics listener serves it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import Select, WebDriverWait

from extender.service import SchedulingService
from tests.browser.conftest import save_screenshot
from tests.support.web import demo_pod, demo_service, serve, service_for_objects, varied_objects, varied_service

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def demo() -> Iterator[tuple[SchedulingService, str]]:
    service = demo_service()
    with serve(service) as url:
        yield service, url


@pytest.fixture(scope="module")
def big() -> Iterator[tuple[SchedulingService, str]]:
    service = varied_service(1000)
    with serve(service) as url:
        yield service, url


def held(service) -> list[tuple[str, dict, float]]:
    """What the reservation ledger holds (pod, charges, expiry): a what-if must leave it as it was."""
    return [(r.pod_uid, dict(r.charges), r.expires) for r in service.reservations.all()]


def click(browser, element) -> None:
    """Click a link or submit button and wait until the next page replaced this one. While Chrome swaps the
    documents, a look at the old element can fail with a generic "Node with given id does not belong to the
    document" instead of a stale-element error (seen once in CI): the wait asks again, and the next look says
    stale."""
    html = browser.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(browser, 30, ignored_exceptions=(WebDriverException,)).until(staleness_of(html))


def body_text(browser) -> str:
    return browser.find_element(By.TAG_NAME, "body").text


def test_pods_list_links_to_ranked_nodes(browser, demo, screenshots):
    _, url = demo
    browser.get(f"{url}/ui/")  # redirects to the pod list
    assert browser.current_url.endswith("/ui/pods")
    text = body_text(browser)
    assert "team-a/train-1" in text and "team-a/pick-gpu" in text
    assert "ready" in browser.find_element(By.ID, "state").text
    assert "dra-extender" in browser.find_element(By.ID, "state").text
    save_screenshot(browser, screenshots, "web-pods")
    click(browser, browser.find_element(By.LINK_TEXT, "team-a/train-1"))
    assert "/ui/pods/team-a/train-1" in browser.current_url
    text = body_text(browser)
    assert "Pod team-a/train-1" in text and "Ranked nodes" in text
    assert "ClusterQueue team-a" in text
    rows = browser.find_elements(By.CSS_SELECTOR, "table.ranking tbody tr")
    assert len(rows) == 4  # every demo node, ranked
    first = rows[0].find_elements(By.TAG_NAME, "td")
    assert first[0].text == "1" and first[2].text == "pass"
    save_screenshot(browser, screenshots, "web-pod")
    node_name = first[1].text
    click(browser, rows[0].find_element(By.TAG_NAME, "a"))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Node {node_name}"


def test_what_if_form_ranks_without_reserving(browser, demo, screenshots):
    service, url = demo
    before = held(service)
    browser.get(f"{url}/ui/explain")
    area = browser.find_element(By.ID, "pod-text")
    area.clear()
    manifest = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: what-if-1\n  namespace: team-a\n  labels:\n"
        "    kueue.x-k8s.io/queue-name: gpus\nspec:\n  resourceClaims:\n  - name: gpu\n"
        "    resourceClaimTemplateName: two-gpus\n"
    )
    area.send_keys(manifest)
    click(browser, browser.find_element(By.CSS_SELECTOR, "form.whatif button[type=submit]"))
    text = body_text(browser)
    assert "What-if: Pod team-a/what-if-1" in text
    assert "nothing reserved" in text
    assert browser.find_elements(By.CSS_SELECTOR, "table.ranking tbody tr")
    assert held(service) == before
    assert service.last_decision("team-a", "what-if-1") is None  # what-if is not a decision kube-scheduler made
    # bad input comes back on the form, as text
    area = browser.find_element(By.ID, "pod-text")
    area.clear()
    area.send_keys("kind: Pod\nmetadata: {}\n")
    click(browser, browser.find_element(By.CSS_SELECTOR, "form.whatif button[type=submit]"))
    assert "metadata.name" in browser.find_element(By.CSS_SELECTOR, ".error").text
    save_screenshot(browser, screenshots, "what-if-error", full_page=False, docs=False)


def test_nodes_node_and_queues_on_demo(browser, demo, screenshots):
    _, url = demo
    browser.get(f"{url}/ui/nodes")
    text = body_text(browser)
    assert "4 nodes" in text and "on-demand" in text and "spot" in text
    cells = browser.find_elements(By.CSS_SELECTOR, "ul.grid span.cell")
    assert len(cells) == 28  # 8 + 4 + 8 + 8 devices
    click(browser, browser.find_element(By.LINK_TEXT, "gpu-od-1"))
    text = body_text(browser)
    assert "Node gpu-od-1" in text
    first_device = browser.find_element(By.CSS_SELECTOR, "table.devices tbody tr td").text
    assert first_device.split() == ["gpu-0", "gpu.example.com/gpu-od-1"]
    assert "team-a/trainer-0" in text  # the pod its claim is reserved for
    click(browser, browser.find_element(By.LINK_TEXT, "Queues"))
    text = body_text(browser)
    assert "ClusterQueue team-a" in text and "ClusterQueue team-b" in text
    assert "cohort gpu-sharing" in text
    assert browser.find_elements(By.CSS_SELECTOR, "svg.bar rect.seg.usage")
    save_screenshot(browser, screenshots, "web-queues")


def test_thousand_nodes_grid_pages_and_filters(browser, big, screenshots):
    _, url = big
    started = time.perf_counter()
    browser.get(f"{url}/ui/nodes")
    loaded = time.perf_counter() - started
    text = body_text(browser)
    assert "1001 nodes" in text
    assert "page 1 of 11" in text
    assert len(browser.find_elements(By.CSS_SELECTOR, "ul.grid li")) == 100
    assert loaded < 5, f"the 1000-node grid took {loaded:.2f} s in the browser"
    save_screenshot(browser, screenshots, "web-nodes")
    click(browser, browser.find_element(By.LINK_TEXT, "next"))
    assert "page 2 of 11" in body_text(browser)
    Select(browser.find_element(By.ID, "f-state")).select_by_visible_text("in-flight")
    click(browser, browser.find_element(By.CSS_SELECTOR, "form.filter button"))
    rows = browser.find_elements(By.CSS_SELECTOR, "ul.grid li")
    assert [r.find_element(By.TAG_NAME, "a").text for r in rows] == ["node-special"]
    click(browser, browser.find_element(By.LINK_TEXT, "node-special"))
    text = body_text(browser)
    for state in ("in-flight", "tainted", "partial", "allocated", "free"):
        assert state in text
    assert "bench/launching (not bound yet)" in text
    save_screenshot(browser, screenshots, "web-node", full_page=False)
    click(browser, browser.find_element(By.LINK_TEXT, "bench/launching"))
    assert "Pod bench/launching" in body_text(browser)


def test_names_with_html_are_text(browser, screenshots):
    hostile = "<b>bold<img src=x onerror=\"document.title='owned'\">"  # no "/": Kubernetes names never hold one
    objects = varied_objects(2)
    for obj in objects:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == "node-00000":
            obj["metadata"]["name"] = hostile
    service = service_for_objects(objects)
    with serve(service) as url:
        browser.get(f"{url}/ui/nodes")
        assert hostile in body_text(browser)
        assert browser.title != "owned"
        assert not browser.find_elements(By.CSS_SELECTOR, "ul.grid b")
        click(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "<b>bold"))
        assert browser.find_element(By.TAG_NAME, "h1").text == f"Node {hostile}"


def test_demo_pod_manifest_round_trip(demo):
    """The demo pods parse as the what-if form would parse them (guards the fixture itself)."""
    assert demo_pod("pod-two-gpus.yaml")["metadata"]["name"] == "train-1"


def test_first_look_after_make_run(browser, screenshots):
    """The demo as `make run` serves it, nothing asked yet: the Pods page lists the cluster's pods, one of them
    opens with the what-if whose example names a real LocalQueue and, submitted as it is, ranks the nodes."""
    from extender.commands.assembly import demo_snapshot_text
    from tests.support.web import service_for_text

    service = service_for_text(demo_snapshot_text())
    with serve(service) as url:
        browser.get(f"{url}/ui/pods")
        text = body_text(browser)
        assert "team-a/trainer-0" in text and "team-b/infer-0" in text and "no decision by this process" in text
        click(browser, browser.find_element(By.LINK_TEXT, "team-a/trainer-0"))
        assert "bound on gpu-od-1" in body_text(browser)
        browser.get(f"{url}/ui/explain")
        example = browser.find_element(By.ID, "pod-text").get_property("value")
        assert "kueue.x-k8s.io/queue-name: gpus" in example
        click(browser, browser.find_element(By.CSS_SELECTOR, "form.whatif button"))  # submitted as it is
        text = body_text(browser)
        assert "What-if: Pod team-a/my-job-0" in text and "ClusterQueue team-a" in text
        assert browser.find_elements(By.CSS_SELECTOR, "table.ranking tbody tr")
        browser.get(f"{url}/ui/queues")
        assert "nobody borrows" in body_text(browser)
        axis = browser.find_elements(By.CSS_SELECTOR, "div.axis")
        assert axis and axis[0].text.startswith("0")
