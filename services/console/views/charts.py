"""Small SVG charts drawn on the server: lines with an optional band, points, stacked bars.

A chart is plain geometry (paths, rectangles, tick labels in SVG coordinates) that the
template writes out, so pages need no chart library and no script to show a curve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH, HEIGHT = 560, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 14, 28


@dataclass(frozen=True)
class Series:
    label: str
    # CSS class that colours it: s0, s1, ... (see console.css).
    style: str
    points: Sequence[tuple[float, float]]
    # Drawn as dots rather than a line (validations, a few points apart).
    dots: bool = False
    # A band around the line: (x, low, high) per point, e.g. mean ± std.
    band: Sequence[tuple[float, float, float]] = ()


@dataclass(frozen=True)
class Bars:
    """Stacked bars: one stack per x, one segment per label."""

    labels: Sequence[str]
    styles: Sequence[str]
    stacks: Sequence[tuple[float, Sequence[float]]]


@dataclass
class Chart:
    title: str
    unit: str = ""
    width: int = WIDTH
    height: int = HEIGHT
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(css class, path d)."""
    bands: list[tuple[str, str]] = field(default_factory=list)
    dots: list[tuple[str, float, float, str]] = field(default_factory=list)
    """(css class, cx, cy, title)."""
    rects: list[tuple[str, float, float, float, float, str]] = field(default_factory=list)
    """(css class, x, y, width, height, title)."""
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    """(css class, label)."""
    empty: bool = True

    @property
    def plot_left(self) -> int:
        return LEFT

    @property
    def plot_right(self) -> int:
        return self.width - RIGHT

    @property
    def plot_bottom(self) -> int:
        return self.height - BOTTOM


def sparkline(values: Sequence[float], width: int = 120, height: int = 24) -> str:
    """The path of a small line through `values`, for a table cell; empty without two values."""
    usable = [v for v in values if math.isfinite(v)]
    if len(usable) < 2:
        return ""
    low, high = min(usable), max(usable)
    span = high - low or 1.0
    step = width / (len(usable) - 1)
    return "M" + " L".join(
        f"{i * step:.1f},{height - 2 - (v - low) / span * (height - 4):.1f}"
        for i, v in enumerate(usable)
    )


@dataclass(frozen=True)
class _Scale:
    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        low, high, value = (math.log10(self.low), math.log10(self.high), math.log10(value)) if self.log else (
            self.low, self.high, value)  # fmt: skip
        span = high - low or 1.0
        return round(self.start + (value - low) / span * (self.end - self.start), 2)


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    unit: str = "",
    log_y: bool = False,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> Chart:
    chart = Chart(title, unit, width, height)
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points] + [
        v for s in series for _, lo, hi in s.band for v in (lo, hi)
    ]
    ys = [y for y in ys if math.isfinite(y) and (y > 0 or not log_y)]
    if not xs or not ys:
        return chart
    chart.empty = False
    x = _Scale(min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1, LEFT, chart.plot_right)
    y = _y_scale(ys, chart, log_y)
    for s in series:
        usable = [(px, py) for px, py in s.points if math.isfinite(py) and (py > 0 or not log_y)]
        chart.legend.append((s.style, s.label if usable else f"{s.label} (none)"))
        if not usable:
            continue
        if s.band:
            upper = [f"{x(bx)},{y(_clamp(hi, y))}" for bx, _, hi in s.band]
            lower = [f"{x(bx)},{y(_clamp(lo, y))}" for bx, lo, _ in reversed(s.band)]
            chart.bands.append((s.style, "M" + " L".join(upper + lower) + " Z"))
        if s.dots or len(usable) == 1:
            chart.dots += [
                (s.style, x(px), y(py), f"{s.label} at {px:g}: {py:.4g}") for px, py in usable
            ]
        else:
            chart.lines.append((s.style, "M" + " L".join(f"{x(px)},{y(py)}" for px, py in usable)))
    chart.x_ticks = [
        (x(v), f"{v:g}") for v in _ticks(x.low, x.high, integer=True) if x.low <= v <= x.high
    ]
    return chart


def bar_chart(title: str, bars: Bars, *, unit: str = "") -> Chart:
    chart = Chart(title, unit)
    totals = [sum(v for v in values if math.isfinite(v)) for _, values in bars.stacks]
    if not totals:
        return chart
    chart.empty = False
    xs = [bx for bx, _ in bars.stacks]
    lo, hi = min(xs) - 0.5, max(xs) + 0.5
    x = _Scale(lo, hi, LEFT, chart.plot_right)
    y = _y_scale([0.0, max(totals) or 1.0], chart, False)
    width = max(1.0, (chart.plot_right - LEFT) / (hi - lo) * 0.7)
    for bx, values in bars.stacks:
        base = 0.0
        for label, style, value in zip(bars.labels, bars.styles, values, strict=True):
            if not math.isfinite(value) or value <= 0:
                continue
            top = y(base + value)
            chart.rects.append((style, round(x(bx) - width / 2, 2), top, round(width, 2), round(y(base) - top, 2),
                                f"step {bx:g} {label}: {value:.3g} {unit}".rstrip()))  # fmt: skip
            base += value
    chart.legend = list(zip(bars.styles, bars.labels, strict=True))
    chart.x_ticks = [
        (x(v), f"{v:g}") for v in _ticks(min(xs), max(xs), integer=True) if min(xs) <= v <= max(xs)
    ]
    return chart


def _y_scale(ys: list[float], chart: Chart, log: bool) -> _Scale:
    low, high = min(ys), max(ys)
    if log:
        low, high = 10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high))
        if high <= low:
            high = low * 10
        scale = _Scale(low, high, chart.plot_bottom, TOP, log=True)
        exponent = math.log10(low)
        while exponent <= math.log10(high) + 1e-9:
            chart.y_ticks.append((scale(10**exponent), f"1e{int(exponent)}"))
            exponent += 1
        return scale
    if high == low:
        low, high = low - 0.5, high + 0.5
    ticks = _ticks(low, high)
    scale = _Scale(min(low, ticks[0]), max(high, ticks[-1]), chart.plot_bottom, TOP)
    # + 0.0 turns the -0.0 a tick can land on into 0.
    chart.y_ticks = [(scale(v), f"{v + 0.0:.4g}") for v in ticks]
    return scale


def _clamp(value: float, scale: _Scale) -> float:
    return min(max(value, scale.low), scale.high)


def _ticks(low: float, high: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round tick values covering [low, high]."""
    span = high - low or 1.0
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if integer:
        step = max(1.0, round(step))
    first = math.floor(low / step) * step
    values = []
    value = first
    while value <= high + step * 1e-9:
        values.append(round(value, 10))
        value += step
    return values or [low]
