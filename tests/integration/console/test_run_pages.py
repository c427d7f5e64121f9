"""A short real training run as the console shows it: the run page, a batch, and what an unknown id or a store
that is down reads as."""

from __future__ import annotations

import httpx
import pytest

from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import TrainerClient
from parity.services.console.views.format import number
from tests.conftest import free_port
from tests.integration.console.page_tables import rows

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


def test_the_run_page_shows_its_steps_rewards_validation_and_curves(
    console, trained, deployed_stack, page, screenshots
) -> None:
    trainer = TrainerClient(deployed_stack.trainer.address)
    steps = trainer.list_run_metrics(
        trainer_pb.ListRunMetricsRequest(run_id=trained.run_id)
    ).metrics
    validations = trainer.list_run_metrics(trainer_pb.ListRunMetricsRequest(
        run_id=trained.run_id, kind=trainer_pb.METRICS_KIND_VALIDATION)).metrics  # fmt: skip
    assert [v.step for v in validations] == [0, 3], (
        "parity train records each validation with the trainer"
    )

    page.goto(f"{console.url}/runs", wait_until="load")
    assert trained.run_id in page.inner_text("table")
    page.click(f"text={trained.run_id}")
    page.wait_for_url(f"**/runs/{trained.run_id}")
    assert "completed" in page.inner_text(".facts") and "3 / 3" in page.inner_text(".facts")
    table = {row[0]: row for row in rows(page, "h2:text('Steps') + .table-wrap tbody tr")}
    assert set(table) == {"step 1", "step 2", "step 3"}
    for metrics in steps:
        row = table[f"step {metrics.step}"]
        assert row[2] == number(metrics.values["reward_mean"]) and row[-1] == number(
            validations[-1].values["reward"] if metrics.step == 3 else None
        )
    assert page.locator(".chart path.line").count() >= 4
    assert page.locator(".chart").first.locator("circle").count() == 2, (
        "validation before and after training"
    )
    assert page.errors == []
    screenshots(page, "run", full_page=True)


def test_a_batch_shows_each_rollouts_reward_advantage_outcome_and_the_filters(
    console, trained, deployed_stack, page, screenshots
) -> None:
    batch = TrainerClient(deployed_stack.trainer.address).get_step_batch(
        trainer_pb.GetStepBatchRequest(run_id=trained.run_id, step=1)).batch  # fmt: skip
    page.goto(f"{console.url}/runs/{trained.run_id}/steps/1", wait_until="load")
    assert batch.batch_id in page.inner_text(".facts")
    shown = {session: row for session, row in zip(
        page.eval_on_selector_all("table.rollouts tbody tr td:first-child a", "links => links.map(a => a.title)"),
        rows(page, "table.rollouts tbody tr"), strict=True)}  # fmt: skip
    for sample in batch.samples:
        row = shown[sample.session_id]
        assert row[1] == "succeeded" and row[2] == "trained"
        assert row[3] == number(sample.reward) and row[5] == f"{sample.advantage:+.4f}"
    assert {session for session, r in shown.items() if r[2] == "trained"} == {
        s.session_id for s in batch.samples
    }
    groups = page.locator(".group h3").all_inner_texts()
    assert all(any(group_id in text for text in groups) for group_id in batch.group_ids)
    filters = {row[0]: int(row[1]) for row in rows(page, ".filters-table tbody tr")}
    assert filters == dict(batch.stats.filtered_counts)
    screenshots(page, "batch", full_page=True)


def test_unknown_ids_are_404_pages_and_a_down_store_is_a_banner(
    console, trained, deployed_stack, start_console, page, screenshots
) -> None:
    for path in (
        "/sessions/no-such-session",
        "/runs/no-such-run",
        f"/runs/{trained.run_id}/steps/99",
        "/nowhere",
    ):
        response = httpx.get(f"{console.url}{path}")
        assert response.status_code == 404 and "Not found" in response.text, path
    gone = f"127.0.0.1:{free_port()}"
    orphan = start_console("--store-address", gone, "--assembler-address", deployed_stack.assembler.address,
                           "--trainer-address", deployed_stack.trainer.address, "--rpc-timeout-s", "2")  # fmt: skip
    for path in ("/sessions", "/sessions/anything"):
        response = httpx.get(f"{orphan.url}{path}", timeout=30)
        assert (
            response.status_code == 503 and f"the store at {gone} is unavailable" in response.text
        )
    # The trainer still answers: the run pages work without the store.
    assert httpx.get(f"{orphan.url}/runs/{trained.run_id}", timeout=30).status_code == 200
    page.goto(f"{orphan.url}/sessions", wait_until="load")
    assert "unavailable" in page.inner_text(".banner")
    screenshots(page, "store-down", clip={"x": 0, "y": 0, "width": 1400, "height": 360})
