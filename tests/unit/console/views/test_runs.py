"""The runs list shows every active run as a card, and an active run's page its own latest sync."""

from __future__ import annotations

import re

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from tests.unit.console.views.fake_trainer import FakeTrainer, get, run, steps

TRAINING, COMPLETED = run_pb2.RUN_STATE_TRAINING, run_pb2.RUN_STATE_COMPLETED


def two_active_runs() -> FakeTrainer:
    """alpha and beta train at once; gamma, started after them, has completed."""
    return FakeTrainer(
        runs=[run("gamma", COMPLETED, 6), run("beta", run_pb2.RUN_STATE_WAITING_FOR_DATA, 2, "tiny-beta"),
              run("alpha", TRAINING, 3, "tiny-alpha")],
        training={"alpha": steps("alpha", [0.2, 0.4, 0.7], [0.0, 1.25, 0.5]),
                  "beta": steps("beta", [0.3, 0.35], [2.0, 0.75]), "gamma": steps("gamma", [0.1, 0.2], [0.0, 0.0])},
    )  # fmt: skip


def cards(html: str) -> dict[str, str]:
    """Each active run's card, by run id."""
    section = html.split('<section id="active-runs"', 1)[1].split("</section>", 1)[0]
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r'data-run="([^"]+)">(.*?)\n  </div>', section, re.S)
    }


def dd(card: str, name: str) -> str:
    return re.search(rf'<dd class="{name}"[^>]*>(.*?)</dd>', card, re.S).group(1)  # type: ignore[union-attr]


def test_every_active_run_is_a_card_with_its_step_version_served_model_base_wait_and_reward_curve() -> (
    None
):
    # One run a page: the table shows gamma alone, the cards both active runs, alpha's from the third page.
    response = get(two_active_runs(), "/runs", page_size=1)
    assert response.status_code == 200, response.text
    found = cards(response.text)
    assert list(found) == ["beta", "alpha"]
    alpha = found["alpha"]
    assert '<a href="/runs/alpha">alpha</a>' in alpha and 'class="badge training"' in alpha
    assert (dd(alpha, "step"), dd(alpha, "version"), dd(alpha, "served")) == (
        "3 / 6",
        "3",
        "tiny-alpha",
    )
    assert dd(alpha, "base-wait") == "0.5 s" and dd(found["beta"], "base-wait") == "0.75 s"
    (line,) = re.findall(r'<path class="line s0" d="M([^"]+)"', alpha)
    ys = [float(point.split(",")[1]) for point in line.split(" L")]
    assert len(ys) == 3 and ys[0] > ys[1] > ys[2], "three steps, each reward higher, drawn higher"
    assert 'href="/runs/compare?run=beta&amp;run=alpha"' in response.text
    table = response.text.split('<table class="runs">', 1)[1]
    assert re.findall(r'<input type="checkbox" name="run" value="([^"]+)"', table) == ["gamma"]


def test_without_an_active_run_there_is_no_active_section_and_older_pages_have_none() -> None:
    trainer = two_active_runs()
    trainer.runs = [trainer.runs[0]]
    assert "Active runs" not in get(trainer, "/runs").text
    assert "Active runs" not in get(two_active_runs(), "/runs?page=1", page_size=1).text


def test_an_active_runs_page_shows_its_own_latest_sync_though_another_run_started_later() -> None:
    trainer = two_active_runs()
    trainer.last_sync["alpha"] = trainer_pb.SyncWeightsResponse(
        replicas=[trainer_pb.ReplicaSync(replica="http://replica-a", verified=True, max_logprob_diff=3e-6)])  # fmt: skip
    html = get(trainer, "/runs/alpha").text
    assert trainer.status_asked == ["alpha"]
    assert "Latest weight sync" in html and "http://replica-a" in html and "3.00e-06" in html
