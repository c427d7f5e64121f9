"""The compare page overlays the chosen runs' curves, one series per run, and refuses what it cannot show."""

from __future__ import annotations

import re

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.services.console.views.format import number
from parity.services.console.views.run_compare import MAX_RUNS
from tests.unit.console.views.fake_trainer import FakeTrainer, get, run, steps


def trainer() -> FakeTrainer:
    validation = {name: [trainer_pb.StepMetrics(run_id=name, step=s, values={"reward": v}) for s, v in points]
                  for name, points in {"alpha": [(0, 0.25), (3, 0.6)], "beta": [(0, 0.3)]}.items()}  # fmt: skip
    return FakeTrainer(
        runs=[run("beta", run_pb2.RUN_STATE_TRAINING, 2, "tiny-beta"), run("alpha", run_pb2.RUN_STATE_COMPLETED, 3)],
        training={"alpha": steps("alpha", [0.2, 0.4, 0.7], [0.0, 1.25, 0.5]), "beta": steps("beta", [0.3, 0.35], [2.0, 0.75])},
        validation=validation,
    )  # fmt: skip


def charts(html: str) -> dict[str, list[tuple[str, str]]]:
    """Each chart's lines and dots as (css class, geometry), by title."""
    found = {}
    for block in html.split('<div class="chart">')[1:]:
        title = re.search(r"<h3>(.*?) <span", block).group(1)  # type: ignore[union-attr]
        found[title] = re.findall(r'<path class="line (s\d)" d="([^"]+)"', block) + re.findall(
            r'<circle class="(s\d)" cx="[^"]+" cy="[^"]+" r="[^"]+"><title>([^<]+)</title>', block)  # fmt: skip
    return found


def test_each_chart_has_one_series_per_run_and_the_table_where_each_run_stands() -> None:
    response = get(trainer(), "/runs/compare?run=alpha&run=beta&run=alpha")
    assert response.status_code == 200, response.text
    html = response.text
    rows = re.findall(
        r'<tr>\s*<td><i class="swatch (s\d)"></i><a href="/runs/(\w+)">.*?</tr>', html, re.S
    )
    assert rows == [("s0", "alpha"), ("s1", "beta")], "each run once, in the order asked"
    legends = re.findall(r'<div class="legend">(.*?)</div>', html)
    assert len(legends) == 3 and all("alpha" in legend and "beta" in legend for legend in legends)
    found = charts(html)
    reward = found["training reward (mean)"]
    assert [(style, d.count(",")) for style, d in reward] == [("s0", 3), ("s1", 2)], (
        "a point per step"
    )
    wait = found["wait for the shared base model, seconds"]
    assert [style for style, _ in wait] == ["s0", "s1"]
    validation = found["validation reward"]
    assert validation[0][0] == "s0" and validation[0][1].count(",") == 2
    assert validation[1] == ("s1", "beta at 0: 0.3"), "a lone validation is a dot"
    beta = html.split('href="/runs/beta">beta</a>', 1)[1].split("</tr>", 1)[0]
    cells = re.findall(r'<td class="n">([^<]*)</td>', beta)
    assert cells == ["2 / 6", "2", number(0.35), number(0.3), number(0.75), number(2.75)]
    assert "tiny-beta" in beta and 'hx-trigger="every 5s"' in html, (
        "beta trains: the page refreshes"
    )


def test_no_run_is_a_400_too_many_runs_a_400_and_an_unknown_run_a_404_naming_it() -> None:
    for path in ("/runs/compare", "/runs/compare?run="):
        refused = get(trainer(), path)
        assert refused.status_code == 400 and "no run to compare" in refused.text, path
    many = "&".join(f"run=r{i}" for i in range(MAX_RUNS + 1))
    refused = get(trainer(), f"/runs/compare?{many}")
    assert refused.status_code == 400 and f"compare at most {MAX_RUNS} runs" in refused.text
    missing = get(trainer(), "/runs/compare?run=alpha&run=nope")
    assert missing.status_code == 404 and "Not found" in missing.text
    assert "this trainer has no run &#39;nope&#39;" in missing.text
