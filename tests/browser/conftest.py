"""Headless Chromium from the distribution (chromium + chromium-driver packages), driven through Selenium.

No browser is downloaded: Selenium is pointed at /usr/bin/chromedriver and /usr/bin/chromium, which `make deps`
(tools/deps.sh) installs when they are missing. Without them the browser tests skip locally and fail under CI=true.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.requirements import missing_requirement

CHROMIUM = os.environ.get("CHROMIUM_BINARY", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BINARY", "/usr/bin/chromedriver")


def _missing() -> str:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).is_file() and os.access(path, os.X_OK)):
            return f"{path} not installed (apt-get install chromium chromium-driver; make deps installs them)"
    return ""


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    missing = _missing()
    if missing:
        missing_requirement(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture()
def screenshots(tmp_path: Path) -> Path:
    """Where a test saves its screenshots: its temp dir, and also WEB_SCREENSHOTS_DIR when set (how the
    README's pictures under docs/ were made)."""
    return tmp_path


def save_screenshot(driver: object, directory: Path, name: str, *, full_page: bool = True, docs: bool = True) -> Path:
    """A PNG of the page; full_page: the window is stretched to the document height first (up to 1400 px)."""
    if full_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")  # type: ignore[attr-defined]
        driver.set_window_size(1280, min(max(int(height), 600), 1400))  # type: ignore[attr-defined]
    path = directory / f"{name}.png"
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    driver.set_window_size(1280, 900)  # type: ignore[attr-defined]
    docs_dir = os.environ.get("WEB_SCREENSHOTS_DIR")
    if docs and docs_dir:
        Path(docs_dir).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(docs_dir) / path.name)
    return path
