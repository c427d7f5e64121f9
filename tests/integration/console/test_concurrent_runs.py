"""Two LoRA runs training at once on one base model, as the console shows them: a card each on the runs list
while both are active, and the compare page overlaying their curves, checked against the trainer's records.

Its vLLM serves adapters (two at once), which the package's shared one does not: this module starts its own.
Each run trains one step, both at once; the test reads the console while both wait for their second step's
rollouts (they stay active, since nothing else rolls out for them), then trains the second step and reads
the finished runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import parity
import parity.engine
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.clients import AssemblerClient, TrainerClient
from parity.services.console.views.format import number
from tests.integration import run_steps
from tests.integration.console.page_tables import rows
from tests.integration.openai_api import sampled_logprobs
from tests.integration.stack_fixtures import TrainingStack, start_training_stack
from tests.integration.trainer.conftest import serving
from tests.integration.trainer.test_learning import served_rewards

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

RANK = 8
STEPS = 2
GROUPS = 2
ROLLOUTS = 4
MAX_TOKENS = 12
PROMPTS = ["Tell me about your day.", "Describe the sea."]
RUN_IDS = ("console-alpha", "console-beta")
STEP_TIMEOUT_S = 240.0
# What a chart shows, by title: each series' lines as (css class, points) and dots as their titles.
CHARTS_JS = """charts => Object.fromEntries(charts.map(c => [c.querySelector('h3').firstChild.textContent.trim(), {
    lines: [...c.querySelectorAll('path.line')].map(p => [p.getAttribute('class'), p.getAttribute('d').split(' L').length]),
    dots: [...c.querySelectorAll('circle title')].map(t => t.textContent),
    legend: [...c.querySelectorAll('.legend span')].map(s => s.innerText.trim())}]))"""


@pytest.fixture(scope="module")
def lora_vllm(tiny_model_dir, tmp_path_factory) -> Iterator[Any]:
    with serving(tiny_model_dir, tmp_path_factory, lora_rank=RANK, max_loras=2) as server:
        yield server


@pytest.fixture(scope="module")
def concurrent_stack(module_services, lora_vllm, tmp_path_factory) -> Iterator[TrainingStack]:
    stack = start_training_stack(module_services, lora_vllm, tmp_path_factory.mktemp("concurrent"),
                                 "--max-concurrent-runs", "2")  # fmt: skip
    previous = parity.current_config()
    parity.configure(
        ingest_url=stack.addresses.ingest_url, assembler_address=stack.assembler.address
    )
    yield stack
    parity.configure(ingest_url=previous.ingest_url, assembler_address=previous.assembler_address)


async def agent(task: dict[str, Any]) -> float:
    """One reply from the run's own adapter (the model it is served under); its share of word-start tokens."""
    completion = await parity.get_async_chat_client().chat.completions.create(
        model=task["model"], messages=[{"role": "user", "content": task["prompt"]}], max_tokens=MAX_TOKENS,
        temperature=1.0, logprobs=True,
    )  # fmt: skip
    tokens = [entry.token for entry in sampled_logprobs(completion.choices[0])]
    return sum(token.startswith(" ") for token in tokens) / max(1, len(tokens))


def train_step(stack: TrainingStack, run: run_pb2.Run, step: int) -> run_pb2.Run:
    """Roll out the groups of the run's step `step`, as sessions of its own, and wait for the trainer to train it."""

    def roll_out(groups: int, tag: str) -> None:
        # Its agents ask for its adapter, which the replica serves once the run's first sync has pushed it.
        tasks = [{"id": f"s{step}-{tag}-t{n}", "prompt": prompt, "model": run.served_model} for n, prompt in enumerate(PROMPTS[:groups])]  # fmt: skip
        results = parity.engine.run(agent, tasks, rollouts_per_task=ROLLOUTS, concurrency=len(tasks) * ROLLOUTS,
                                    progress=False, run_id=f"{run.run_id}-{step}-{tag}", training_run=run.run_id)  # fmt: skip
        assert all(r.outcome == "succeeded" for r in results), [r.error for r in results]

    trained = run_steps.train_step(TrainerClient(stack.trainer.address), AssemblerClient(stack.assembler.address),
                                   run.run_id, step, roll_out, timeout_s=STEP_TIMEOUT_S)  # fmt: skip
    assert trained.state != run_pb2.RUN_STATE_FAILED, trained.error_message
    return trained


def both(stack: TrainingStack, runs: list[run_pb2.Run], step: int) -> list[run_pb2.Run]:
    with ThreadPoolExecutor(len(runs)) as pool:
        return list(pool.map(lambda run: train_step(stack, run, step), runs))


def test_the_console_shows_two_runs_training_at_once_side_by_side_and_compares_their_curves(
    concurrent_stack, start_console, page, screenshots
) -> None:
    stack = concurrent_stack
    trainer = TrainerClient(stack.trainer.address)
    runs = [trainer.start_run(pb.StartRunRequest(run_id=run_id, config=run_pb2.RunConfig(
        model_path=str(stack.vllm.config.model_path), total_steps=STEPS, groups_per_batch=GROUPS, learning_rate=2e-3,
        backend=run_pb2.TRAINING_BACKEND_CPU, rollout_mode=run_pb2.ROLLOUT_MODE_SYNC, lora=run_pb2.LoraConfig(rank=RANK),
    ))).run for run_id in RUN_IDS]  # fmt: skip
    assert [run.served_model for run in runs] == [f"tiny-{run_id}" for run_id in RUN_IDS]
    both(stack, runs, 1)
    console = start_console("--store-address", stack.store.address, "--assembler-address", stack.assembler.address,
                            "--trainer-address", stack.trainer.address)  # fmt: skip

    def metrics(run_id: str) -> list[pb.StepMetrics]:
        return list(trainer.list_run_metrics(pb.ListRunMetricsRequest(run_id=run_id)).metrics)

    # Both wait for their second step's rollouts: active, a card each.
    page.goto(f"{console.url}/runs", wait_until="load")
    cards = page.locator("#active-runs .active-run")
    assert sorted(cards.evaluate_all("cards => cards.map(c => c.dataset.run)")) == sorted(RUN_IDS)
    for run_id in RUN_IDS:
        run = trainer.get_run(pb.GetRunRequest(run_id=run_id)).run
        (first,) = metrics(run_id)
        card = page.locator(f'.active-run[data-run="{run_id}"]')
        assert card.locator("h3 a").inner_text() == run_id
        assert card.locator(".badge").inner_text() == "waiting for data"
        assert card.locator("dd.step").inner_text() == f"1 / {STEPS}"
        assert card.locator("dd.version").inner_text() == str(run.policy_version) == "1"
        assert card.locator("dd.served").inner_text() == run.served_model
        assert (
            card.locator("dd.base-wait").inner_text()
            == f"{number(first.values['base_wait_seconds'])} s"
        )
        # One step: the reward is a dot, titled with the trainer's value.
        assert card.locator("circle title").all_text_contents() == [
            f"training reward (mean ± std) at 1: {first.values['reward_mean']:.4g}"
        ]
    assert page.errors == []
    screenshots(page.locator("#active-runs"), "active-runs")

    # The run started first is not the latest started: its page still shows its own latest sync.
    page.goto(f"{console.url}/runs/{RUN_IDS[0]}", wait_until="load")
    (sync,) = rows(page, "h2:text('Latest weight sync') + table tbody tr")
    assert sync[:2] == [stack.vllm.base_url, "verified"]

    page.goto(f"{console.url}/runs", wait_until="load")
    page.click("text=compare active runs")
    page.wait_for_url("**/runs/compare?*")
    assert sorted(row[0] for row in rows(page, "table.compared tbody tr")) == sorted(RUN_IDS)
    assert page.locator("header .live").count() == 1, "active runs: the page refreshes itself"

    finished = both(stack, runs, STEPS)
    assert [run.state for run in finished] == [run_pb2.RUN_STATE_COMPLETED] * 2
    # Each run's validation, as `parity train` records one: fresh replies of its adapter, not trained on.
    for run in runs:
        rewards = served_rewards(stack.vllm.base_url, per_prompt=4, model=run.served_model)
        trainer.write_validation_metrics(pb.WriteValidationMetricsRequest(
            run_id=run.run_id, step=STEPS, values={"reward": sum(rewards) / len(rewards)}))  # fmt: skip
    # Done: no active section; the runs ticked in the table are compared.
    page.goto(f"{console.url}/runs", wait_until="load")
    assert page.locator("#active-runs").count() == 0
    for run_id in RUN_IDS:
        page.check(f'input[name="run"][value="{run_id}"]')
    page.click("text=compare the ticked runs")
    page.wait_for_url("**/runs/compare?*")
    table = {row[0]: row for row in rows(page, "table.compared tbody tr")}
    assert sorted(table) == sorted(RUN_IDS)
    charts = page.eval_on_selector_all(".chart", CHARTS_JS)
    assert set(charts) == {
        "training reward (mean)",
        "validation reward",
        "wait for the shared base model, seconds",
    }
    styles = {}
    for run_id in RUN_IDS:
        records = metrics(run_id)
        assert [r.step for r in records] == [1, 2]
        last, waits = records[-1].values, [r.values["base_wait_seconds"] for r in records]
        (validation,) = trainer.list_run_metrics(pb.ListRunMetricsRequest(
            run_id=run_id, kind=pb.METRICS_KIND_VALIDATION)).metrics  # fmt: skip
        reward = validation.values["reward"]
        assert table[run_id][1:] == ["completed", f"{STEPS} / {STEPS}", str(STEPS), f"tiny-{run_id}",
                                     number(last["reward_mean"]), number(reward), number(waits[-1]), number(sum(waits))]  # fmt: skip
        assert f"{run_id} at {STEPS}: {reward:.4g}" in charts["validation reward"]["dots"]
        swatch = page.locator(
            f'table.compared tr:has(a:text-is("{run_id}")) i.swatch'
        ).get_attribute("class")
        styles[run_id] = (swatch or "").removeprefix("swatch ")
    # One line per run, in its row's colour, through its two steps.
    for title in ("training reward (mean)", "wait for the shared base model, seconds"):
        assert sorted(charts[title]["lines"]) == sorted(
            [f"line {styles[r]}", STEPS] for r in RUN_IDS
        )
        assert charts[title]["legend"] == list(table), "the legend in the table's order"
    assert page.locator("header .live").count() == 0 and page.errors == []
    screenshots(page, "compare", full_page=True)
