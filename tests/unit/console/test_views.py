"""Charts, session filters and live events: plain values in, page-ready values out."""

from __future__ import annotations

import math

from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.services.console.live import Change, event
from parity.services.console.views.charts import Bars, Series, bar_chart, line_chart, sparkline
from parity.services.console.views.sessions import SessionFilters


def test_a_line_chart_maps_every_point_into_the_plot_and_skips_what_it_cannot_draw() -> None:
    chart = line_chart("reward", [
        Series("mean", "s0", [(1, 0.2), (2, 0.5), (3, 0.9)], band=[(1, 0.1, 0.3), (2, 0.4, 0.6), (3, 0.8, 1.0)]),
        Series("validation", "s1", [(0, 0.3), (3, math.nan)], dots=True),
        Series("kl", "s2", []),
    ])  # fmt: skip
    assert (
        not chart.empty and len(chart.lines) == 1 and len(chart.bands) == 1 and len(chart.dots) == 1
    )
    points = [tuple(map(float, p.split(","))) for p in chart.lines[0][1][1:].split(" L")]
    assert all(
        chart.plot_left <= x <= chart.plot_right and 0 <= y <= chart.plot_bottom for x, y in points
    )
    assert points[0][1] > points[-1][1], "a higher reward is drawn higher"
    assert ("s2", "kl (none)") in chart.legend
    assert [label for _, label in chart.x_ticks] == ["0", "1", "2", "3"]
    assert line_chart("empty", [Series("x", "s0", [])]).empty


def test_a_log_chart_ticks_decades_and_drops_what_is_not_positive() -> None:
    chart = line_chart(
        "probe", [Series("diff", "s0", [(1, 2e-7), (2, 0.0), (3, 3e-5)])], log_y=True
    )
    assert [label for _, label in chart.y_ticks] == ["1e-7", "1e-6", "1e-5", "1e-4"]
    assert chart.lines[0][1].count("L") == 1


def test_bars_stack_their_phases() -> None:
    chart = bar_chart(
        "sync", Bars(["pause", "push"], ["b0", "b1"], [(1, [0.1, 0.3]), (2, [0.0, 0.2])]), unit="s"
    )
    heights = [h for _, _, _, _, h, _ in chart.rects]
    assert len(heights) == 3 and math.isclose(heights[0] + heights[1], 2 * heights[2])
    assert chart.rects[1][5] == "step 1 push: 0.3 s"


def test_a_sparkline_needs_two_points() -> None:
    assert sparkline([0.5]) == "" and sparkline([0.1, 0.9]).startswith("M0.0,22.0 L120.0,2.0")


def test_session_filters_become_a_store_query_and_refuse_what_they_cannot_use() -> None:
    filters, problems = SessionFilters.parse({"run": "r1", "task": "t 7", "outcome": "timed_out", "reward_min": "0.5",
                                              "reward_max": "x", "session": "r1-s0"})  # fmt: skip
    assert problems == ["reward max must be a number, got 'x'"]
    assert filters.bounds == (0.5, math.inf)
    request = filters.request(50, "")
    assert (
        request.order == store_pb.SESSION_ORDER_NEWEST_FIRST
        and request.session_id_prefix == "r1-s0"
    )
    assert dict(request.metadata) == {"parity.run_id": "r1", "task": "t 7"}
    assert (request.state, request.outcome) == (0, session_pb2.SESSION_OUTCOME_TIMED_OUT)
    assert (
        SessionFilters.parse({"outcome": "open"})[0].request(5, "").state
        == session_pb2.SESSION_STATE_OPEN
    )
    assert (
        filters.query(page="p2")
        == "run=r1&task=t+7&outcome=timed_out&reward_min=0.5&session=r1-s0&page=p2"
    )
    assert SessionFilters.parse({"outcome": "exploded"})[1] == [
        "outcome must be one of open, succeeded, failed, timed_out, cancelled"
    ]


def test_a_live_event_escapes_the_error_it_carries() -> None:
    down = event(Change("down", detail='store at <a href="x">evil</a>\nline'))
    assert (
        down.startswith("event: down\ndata: ") and "<a href" not in down and "&lt;a href=" in down
    )
    assert down.count("\n") == 3
    assert event(Change("calls", frozenset({"s1", "s2"}))) == "event: calls\ndata: 2\n\n"
