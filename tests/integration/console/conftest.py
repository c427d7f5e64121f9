"""A real console process and a real browser: Debian's chromium driven by Playwright.

Playwright's own browser download is not used (`make env` installs chromium). A missing
chromium fails the tests, naming what is missing and how to install it; only a developer's
explicit PARITY_SKIP_BROWSER_TESTS=1 skips them, and never under CI (docs/design/test-skips.md).
Screenshots go to the test's temporary folder; with PARITY_SCREENSHOT_DIR set (docs/console
to refresh the docs' pictures), they are copied there too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.waiting import eventually

# The browser: PARITY_CHROMIUM when set (any Chromium executable), else `chromium` on PATH (Debian's).
CHROMIUM_ENV = "PARITY_CHROMIUM"
SKIP_ENV = "PARITY_SKIP_BROWSER_TESTS"
STARTUP_S = 30.0


@dataclass
class Console:
    url: str
    process: subprocess.Popen[str]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _start(log_dir: Path, *args: str) -> Console:
    port = free_port()
    log_path = log_dir / f"console-{port}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "parity.cli", "console", "serve", "--port", str(port), "--log-format", "json", *args],
            stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    console = Console(f"http://127.0.0.1:{port}", process, log_path)

    def answering() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the console exited with {process.returncode}:\n{console.log()}")
        try:
            return httpx.get(f"{console.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    eventually(
        answering,
        timeout_s=STARTUP_S,
        interval_s=0.1,
        what=lambda: f"the console answering:\n{console.log()}\n",
    )
    return console


@pytest.fixture(scope="module")
def start_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Console]]:
    """Factory: start_console("--store-address", ADDR, ...) -> a running `parity console serve`."""
    log_dir = tmp_path_factory.mktemp("console")
    started: list[Console] = []

    def start(*args: str) -> Console:
        started.append(_start(log_dir, *args))
        return started[-1]

    yield start
    for console in started:
        console.process.terminate()
        try:
            console.process.wait(15)
        except subprocess.TimeoutExpired:
            console.process.kill()
            console.process.wait()


def _in_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false")


def _chromium() -> str:
    """The Chromium executable; fails the test when there is none (a skip only on a developer's explicit opt-out)."""
    configured = os.environ.get(CHROMIUM_ENV)
    found = shutil.which(configured) if configured else shutil.which("chromium")
    if found:
        return found
    missing = (
        f"{CHROMIUM_ENV}={configured} is not an executable"
        if configured
        else "no `chromium` on PATH"
    )
    if os.environ.get(SKIP_ENV) == "1" and not _in_ci():
        pytest.skip(f"{missing}; {SKIP_ENV}=1 skips the console's browser tests")
    pytest.fail(
        f"Chromium is missing ({missing}): the console's browser tests drive it through Playwright. Install it "
        f"with `make env` (apt-get install -y chromium, as root or with passwordless sudo), or point {CHROMIUM_ENV} "
        f"at a Chromium executable. Outside CI, {SKIP_ENV}=1 skips these tests instead.",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors
    yield page
    context.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    folder = tmp_path_factory.mktemp("screenshots")
    copy_to = os.environ.get("PARITY_SCREENSHOT_DIR")

    def shoot(target, name: str, **options) -> Path:
        """`target`: a page, or a locator for one element of it."""
        path = folder / f"{name}.png"
        target.screenshot(path=str(path), **options)
        if copy_to:
            Path(copy_to).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(copy_to) / path.name)
        return path

    return shoot
