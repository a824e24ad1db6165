"""A metric across evaluation runs as SVG geometry (pure, no I/O); the template draws it.

Runs are spaced evenly, oldest on the left; the y axis is always 0..1 (recall and MRR are
fractions), so two charts are comparable at a glance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# One colour per rewrite mode, stable across charts.
MODE_COLOURS = {"none": "#8a8f98", "last-turn": "#d97706", "rules": "#2563eb", "llm": "#059669"}
OTHER_COLOUR = "#7c3aed"


@dataclass(frozen=True)
class RunValues:
    """One run's value of the charted metric per mode (a mode the run skipped is absent)."""

    run_id: int
    label: str
    values: Mapping[str, float]


@dataclass(frozen=True)
class ChartPoint:
    run_id: int
    mode: str
    x: float
    y: float
    value: float
    label: str
    current: bool = False


@dataclass(frozen=True)
class ChartSeries:
    mode: str
    colour: str
    points: tuple[ChartPoint, ...]
    polyline: str  # the SVG `points` attribute
    legend_x: float


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class LineChart:
    metric: str
    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    series: tuple[ChartSeries, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]

    @property
    def empty(self) -> bool:
        return not any(s.points for s in self.series)


def line_chart(
    runs: Sequence[RunValues],
    *,
    metric: str,
    modes: Sequence[str] = (),
    current: int | None = None,
    width: int = 720,
    height: int = 260,
    palette: Sequence[str] = (),
) -> LineChart:
    """Place one point per run and mode; `current` marks the run being looked at.

    Modes take their own colours, or `palette`'s in order when one is given (series that are
    not rewrite modes: the rewrite fidelity's policies)."""
    left, right, top, bottom = 44.0, width - 44.0, 30.0, height - 34.0
    order = list(modes) or sorted({m for r in runs for m in r.values})
    step = (right - left) / (len(runs) - 1) if len(runs) > 1 else 0.0

    def x_of(index: int) -> float:
        return round(left + index * step if len(runs) > 1 else (left + right) / 2, 1)

    def y_of(value: float) -> float:
        clamped = min(max(value, 0.0), 1.0)
        return round(bottom - clamped * (bottom - top), 1)

    series = []
    legend_x = left
    for number, mode in enumerate(order):
        points = tuple(
            ChartPoint(
                run_id=run.run_id,
                mode=mode,
                x=x_of(index),
                y=y_of(run.values[mode]),
                value=run.values[mode],
                label=run.label,
                current=run.run_id == current,
            )
            for index, run in enumerate(runs)
            if mode in run.values
        )
        colour = palette[number % len(palette)] if palette else MODE_COLOURS.get(mode, OTHER_COLOUR)
        series.append(
            ChartSeries(
                mode=mode,
                colour=colour,
                points=points,
                polyline=" ".join(f"{p.x},{p.y}" for p in points),
                legend_x=legend_x,
            )
        )
        # 110 for a mode's name; a longer one (a policy's version) pushes the next along.
        legend_x += max(110, 30 + 7 * len(mode))
    y_ticks = tuple(Tick(y_of(v / 4), f"{v / 4:.2f}") for v in range(5))
    # At most about eight labels under the axis, always the first and the last run.
    every = max(1, -(-len(runs) // 8))
    x_ticks = tuple(
        Tick(x_of(i), run.label)
        for i, run in enumerate(runs)
        if i % every == 0 or i == len(runs) - 1
    )
    return LineChart(
        metric=metric,
        width=width,
        height=height,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        series=tuple(series),
        y_ticks=y_ticks,
        x_ticks=x_ticks,
    )
