"""The console refuses to listen beyond loopback without a token, and asks every request for it."""

from __future__ import annotations

import threading

import pytest
from starlette.testclient import TestClient

from parity.services.console import serve_command
from parity.services.console.app import create_app
from parity.services.console.auth import COOKIE
from parity.services.console.settings import ConsoleConfig
from parity.services.runtime.errors import InvalidArgument

# Nothing listens here: a request that got past the token check would be a 503 page, not a 401.
NOWHERE = "127.0.0.1:9"


def test_binding_beyond_loopback_needs_a_token() -> None:
    with pytest.raises(InvalidArgument, match="PARITY_CONSOLE_TOKEN"):
        ConsoleConfig(host="0.0.0.0")
    assert ConsoleConfig(host="0.0.0.0", token="s3cret").token == "s3cret"
    for loopback in ("127.0.0.1", "::1", "localhost", "127.1.2.3"):
        ConsoleConfig(host=loopback)


def test_the_command_exits_with_the_reason_and_reads_the_token_from_the_environment(
    monkeypatch, capsys
) -> None:
    assert serve_command.main(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert "without a token" in capsys.readouterr().err
    monkeypatch.setenv("PARITY_CONSOLE_TOKEN", "from-env")
    args = serve_command.build_parser().parse_args(["--host", "0.0.0.0"])
    from parity.services.runtime.config import config_from_args

    assert config_from_args(ConsoleConfig, args, "console").token == "from-env"


def test_every_page_but_health_needs_the_token() -> None:
    config = ConsoleConfig(
        token="s3cret", store_address=NOWHERE, assembler_address=NOWHERE, trainer_address=NOWHERE
    )
    with TestClient(create_app(config), follow_redirects=False) as client:
        assert client.get("/healthz").status_code == 200
        refused = client.get("/sessions")
        assert refused.status_code == 401 and "needs its token" in refused.text
        assert client.get("/sessions", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/static/console.css").status_code == 401
        # With the token the page is served; the store is down, which the page says.
        down = client.get("/sessions", headers={"Authorization": "Bearer s3cret"})
        assert down.status_code == 503 and f"the store at {NOWHERE} is unavailable" in down.text
        # A browser opens a link with ?token= once: a cookie, and the token leaves the address bar.
        opened = client.get("/sessions?run=r1&token=s3cret")
        assert opened.status_code == 303 and opened.headers["location"] == "/sessions?run=r1"
        assert (
            "httponly" in opened.headers["set-cookie"].lower()
            and "samesite=strict" in opened.headers["set-cookie"].lower()
        )
        client.cookies.set(COOKIE, "s3cret")
        assert client.get("/sessions").status_code == 503


def test_pages_forbid_scripts_from_anywhere_but_the_console() -> None:
    config = ConsoleConfig(
        store_address=NOWHERE, assembler_address=NOWHERE, trainer_address=NOWHERE
    )
    with TestClient(create_app(config)) as client:
        page = client.get("/runs")
        assert page.status_code == 503 and "the trainer at" in page.text
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'self'" in policy
        assert client.get("/no/such/page").status_code == 404


def test_parity_up_beyond_loopback_without_the_token_stops_before_starting_anything(
    tmp_path, monkeypatch
) -> None:
    from parity.services.stack import up

    monkeypatch.delenv("PARITY_CONSOLE_TOKEN", raising=False)
    args = up.build_parser().parse_args(
        ["--host", "0.0.0.0", "--data-dir", str(tmp_path / "stack")]
    )
    assert up.run(args, threading.Event()) == 2
    assert not (tmp_path / "stack").exists(), "nothing was started, not even the data folder"
