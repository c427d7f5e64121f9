"""A real console process and a real browser: Debian's chromium driven by Playwright.

Playwright's own browser download is not used (`make env` installs chromium). A missing
chromium fails the tests, naming what is missing and how to install it; only a developer's
explicit PARITY_SKIP_BROWSER_TESTS=1 skips them, and never under CI (docs/design/test-skips.md).
Screenshots go to the test's temporary folder; with PARITY_SCREENSHOT_DIR set (docs/console
to refresh the docs' pictures), they are copied there too.

The package's modules read one stack after one short training run, each from its own side (the run's pages,
a session's page, the session lists): the stack, the run, the console and the browser are the package's,
started once (tests/conftest.py keeps the package on one worker).
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

import parity
from tests.conftest import free_port
from tests.integration.console.tool_agent import TASKS, VAL_TASKS, tool_agent
from tests.integration.stack_fixtures import TrainingStack, own_training_stack
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


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
def deployed_stack(
    training_vllm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrainingStack]:
    """The package's one stack, in place of the module-scoped one that would start a stack per module."""
    yield from own_training_stack(tmp_path_factory, training_vllm)


@pytest.fixture(scope="package")
def trained(deployed_stack, tmp_path_factory):
    result = parity.train(
        tool_agent, TASKS, val_tasks=VAL_TASKS, model=deployed_stack.vllm.config.model_path,
        stack=deployed_stack.addresses, steps=3, groups_per_batch=2, rollouts_per_task=4, max_tokens=24,
        learning_rate=3e-3, val_samples=2, output_dir=str(tmp_path_factory.mktemp("runs")), progress=False,
    )  # fmt: skip
    assert result.state == "completed", result.error
    return result


@pytest.fixture(scope="package")
def sdk_on_stack(deployed_stack, trained):
    """After the run (which restores the SDK's settings), point the SDK at the stack for the tests' own agents."""
    previous = parity.current_config()
    parity.configure(ingest_url=deployed_stack.addresses.ingest_url, assembler_address=deployed_stack.assembler.address,
                     store_address=deployed_stack.store.address)  # fmt: skip
    yield
    parity.configure(
        **{k: getattr(previous, k) for k in ("ingest_url", "assembler_address", "store_address")}
    )


@pytest.fixture(scope="package")
def console(deployed_stack, start_console, trained):
    return start_console("--store-address", deployed_stack.store.address, "--assembler-address",
                         deployed_stack.assembler.address, "--trainer-address", deployed_stack.trainer.address)  # fmt: skip
