"""Chart geometry: where each bar, line, point and label goes, as plain shapes.

No markup here. A chart is a list of `Shape`s (an SVG tag, its numeric
attributes, its text and tooltip), drawn by the `chart` macro of
fleet_goodput/report/templates/macros.html.j2, which escapes every string. Charts have a viewBox
and are drawn at the width of their box, so they fill the page; label
margins are sized from the longest label, and a label too long for its margin
is shortened with its full text in the tooltip. Drawn values carry
`mark=True`, which the page's draw check counts in a browser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FULL, HALF = 1040, 510  # viewBox widths: a chart across the page, and one of two side by side
CHAR_PX = 7.0  # width of a lower-case character of the 12 px label font, a little above system-ui's average
WIDE_CHAR_PX = 8.6  # capitals, digits and '_' are wider
FACTOR_COLOURS = {"SG": "#1f77b4", "RG": "#2ca02c", "PG": "#9467bd", "MPG": "#d62728"}
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
)
CATEGORY_COLOURS = {
    "queued": "#9e9e9e",
    "partial": "#c7c7c7",
    "productive": "#2ca02c",
    "pending": "#98df8a",
    "lost": "#d62728",
    "data_wait": "#ff7f0e",
    "compile": "#9467bd",
    "checkpoint_save": "#1f77b4",
    "checkpoint_restore": "#aec7e8",
    "init": "#8c564b",
    "idle": "#e377c2",
    "idle_capacity": "#bcbd22",
    "held": "#17becf",
    "unmeasured": "#dbdb8d",
}


@dataclass(frozen=True)
class Shape:
    tag: str  # rect, circle, polyline, line or text
    attrs: dict = field(default_factory=dict)
    text: str = ""
    tip: str = ""  # tooltip (<title>)
    mark: bool = False  # a drawn value


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    width: int
    height: int
    shapes: list[Shape]


def _px(value: float) -> float:
    return round(value, 1)


def text_px(text: str) -> float:
    """An upper estimate of `text`'s width in the 12 px label font (no font metrics offline)."""
    return sum(WIDE_CHAR_PX if c.isupper() or c.isdigit() or c in "_%@#MW" else CHAR_PX for c in text)


def shorten(text: str, width_px: float) -> str:
    """`text` cut with an ellipsis to fit `width_px` of label font."""
    if text_px(text) <= width_px:
        return text
    while len(text) > 3 and text_px(text + "…") > width_px:
        text = text[:-1]
    return text + "…"


def _label_margin(labels: list[str], width: int) -> float:
    return min(max([text_px(label) for label in labels] + [30]) + 12, width * 0.38)


def _legend(names: list[str], colours: list[str], x: float, y: float, width: float) -> tuple[list[Shape], float]:
    """Legend entries left to right, wrapping at `width`; returns the shapes and the height used."""
    shapes, cx, cy = [], x, y
    for name, colour in zip(names, colours):
        item_w = 16 + text_px(name) + 16
        if cx + item_w > x + width and cx > x:
            cx, cy = x, cy + 18
        shapes += [
            Shape("rect", {"x": _px(cx), "y": _px(cy), "width": 11, "height": 11, "fill": colour}),
            Shape("text", {"x": _px(cx + 16), "y": _px(cy + 10)}, name),
        ]
        cx += item_w
    return shapes, (cy - y + 18 if names else 0)


def _percent_grid(left: float, top: float, plot_w: float, plot_h: float, y_max: float) -> list[Shape]:
    shapes = []
    for k in range(5):
        y = top + plot_h - plot_h * k / 4
        shapes += [
            Shape("line", {"x1": _px(left), "x2": _px(left + plot_w), "y1": _px(y), "y2": _px(y), "stroke": "#e5e5e5"}),
            Shape("text", {"x": _px(left - 6), "y": _px(y + 4), "text-anchor": "end"}, f"{y_max * k / 4:.0%}"),
        ]
    return shapes


def line_chart(
    name: str,
    title: str,
    x_labels: list[str],
    series: dict[str, list[float | None]],
    colours: list[str] | None = None,
    width: int = FULL,
    height: int = 260,
) -> Chart:
    """Ratios per x label, one line per series (gaps where a value is None); labels thinned to fit."""
    colours = colours or [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    names = list(series)
    legend, legend_h = _legend(names, colours, 48, 26, width - 60)
    label_w = max([text_px(label) for label in x_labels] + [8]) + 12
    left, top, right, bottom = 48, 32 + legend_h, label_w / 2 + 4, 30  # room for the last x label, centred
    plot_w, plot_h = width - left - right, height - top - bottom
    y_max = max([1.0] + [v for points in series.values() for v in points if v is not None])
    step = plot_w / max(1, len(x_labels) - 1)

    def x_of(i: int) -> float:
        return left + plot_w / 2 if len(x_labels) == 1 else left + i * step

    shapes = [*legend, *_percent_grid(left, top, plot_w, plot_h, y_max)]
    every = max(1, math.ceil(label_w / step)) if len(x_labels) > 1 else 1
    for i, label in enumerate(x_labels):
        if i % every == 0:
            shapes.append(Shape("text", {"x": _px(x_of(i)), "y": height - 8, "text-anchor": "middle"}, label))
    radius = 3 if len(x_labels) <= 48 else 2
    for (series_name, points), colour in zip(series.items(), colours):
        coords = [
            (x_of(i), top + plot_h - plot_h * v / y_max, v, x_labels[i]) for i, v in enumerate(points) if v is not None
        ]
        if len(coords) > 1:
            path = " ".join(f"{_px(x)},{_px(y)}" for x, y, _, _ in coords)
            shapes.append(
                Shape(
                    "polyline",
                    {"points": path, "fill": "none", "stroke": colour, "stroke-width": 2},
                    tip=series_name,
                    mark=True,
                )
            )
        shapes += [
            Shape(
                "circle",
                {"cx": _px(x), "cy": _px(y), "r": radius, "fill": colour},
                tip=f"{series_name} {label}: {v:.1%}",
                mark=True,
            )
            for x, y, v, label in coords
        ]
    return Chart(name, title, width, height, shapes)


def bar_groups(
    name: str, title: str, labels: list[str], series: dict[str, list[float | None]], width: int = HALF
) -> Chart:
    """Horizontal bars: one group per label (e.g. a team), one bar per series (SG, RG, PG, MPG), as percentages."""
    colours = [FACTOR_COLOURS.get(s, PALETTE[i % len(PALETTE)]) for i, s in enumerate(series)]
    legend, legend_h = _legend(list(series), colours, 8, 26, width - 16)
    left = _label_margin(labels, width)
    top, right, bar_h = 46 + legend_h, 44, 7
    group_h = bar_h * len(series) + 10
    plot_w = width - left - right
    height = int(top + group_h * len(labels) + 8)
    x_max = max([1.0] + [v for points in series.values() for v in points if v is not None])
    shapes = list(legend)
    for k in range(5):
        x = left + plot_w * k / 4
        shapes += [
            Shape("line", {"x1": _px(x), "x2": _px(x), "y1": top - 4, "y2": height - 6, "stroke": "#e5e5e5"}),
            Shape("text", {"x": _px(x), "y": top - 8, "text-anchor": "middle"}, f"{x_max * k / 4:.0%}"),
        ]
    for g, label in enumerate(labels):
        y0 = top + g * group_h
        shapes.append(
            Shape(
                "text",
                {"x": _px(left - 6), "y": _px(y0 + group_h / 2 + 2), "text-anchor": "end"},
                shorten(label, left - 12),
                tip=label,
            )
        )
        for s, ((series_name, points), colour) in enumerate(zip(series.items(), colours)):
            value = points[g]
            if value is None:
                continue
            y = y0 + 4 + s * bar_h
            shapes.append(
                Shape(
                    "rect",
                    {
                        "x": _px(left),
                        "y": _px(y),
                        "width": _px(max(plot_w * value / x_max, 0.5)),
                        "height": bar_h - 1,
                        "fill": colour,
                    },
                    tip=f"{label} {series_name}: {value:.1%}",
                    mark=True,
                )
            )
    return Chart(name, title, width, height, shapes)


def stacked_bars(
    name: str,
    title: str,
    labels: list[str],
    stacks: list[dict[str, float]],
    categories: list[str],
    unit: str = "chip-h",
    width: int = FULL,
    legend: bool = True,
) -> Chart:
    """Horizontal bars, one per label, split by category (chip-hours), the total at the bar's end.
    Without `legend` the labels name the categories (one category per bar)."""
    used = [c for c in categories if any((stack.get(c) or 0) > 0 for stack in stacks)]
    colours = [CATEGORY_COLOURS.get(c, PALETTE[i % len(PALETTE)]) for i, c in enumerate(used)]
    legend, legend_h = _legend(used, colours, 8, 26, width - 16) if legend else ([], 0)
    left = _label_margin(labels, width)
    top, right, row_h = 34 + legend_h, 80, 22
    plot_w = width - left - right
    height = int(top + row_h * len(labels) + 8)
    total_max = max([sum((s.get(c) or 0) for c in categories) for s in stacks] + [1e-12])
    shapes = list(legend)
    for i, (label, stack) in enumerate(zip(labels, stacks)):
        y = top + i * row_h
        shapes.append(
            Shape(
                "text",
                {"x": _px(left - 6), "y": _px(y + 14), "text-anchor": "end"},
                shorten(label, left - 12),
                tip=label,
            )
        )
        x = float(left)
        for category in used:
            value = stack.get(category) or 0.0
            if value <= 0:
                continue
            bar_w = plot_w * value / total_max
            shapes.append(
                Shape(
                    "rect",
                    {
                        "x": _px(x),
                        "y": y + 3,
                        "width": _px(max(bar_w, 0.5)),
                        "height": row_h - 6,
                        "fill": CATEGORY_COLOURS.get(category, PALETTE[0]),
                    },
                    tip=f"{label} {category}: {value:,.2f} {unit}",
                    mark=True,
                )
            )
            x += bar_w
        total = sum((stack.get(c) or 0) for c in categories)
        shapes.append(Shape("text", {"x": _px(x + 4), "y": _px(y + 14)}, f"{total:,.1f}"))
    return Chart(name, title, width, height, shapes)


def timeline(name: str, title: str, windows: list[dict], categories: list[str], width: int = FULL) -> Chart:
    """A Gantt-style strip of one job: a lane per category, a column per window (`windows` rows of
    job_detail); in each window the lane's bar covers the category's share of the job's chip-time."""
    used = [c for c in categories if any((w.get(c) or 0) > 0 for w in windows)]
    left, top, right, lane_h = _label_margin(used, width), 34, 12, 18
    plot_w = width - left - right
    height = int(top + lane_h * len(used) + 34)
    cell = plot_w / max(1, len(windows))
    shapes = []
    for lane, category in enumerate(used):
        y = top + lane * lane_h
        shapes += [
            Shape("text", {"x": _px(left - 6), "y": _px(y + 13), "text-anchor": "end"}, category),
            Shape(
                "line",
                {
                    "x1": _px(left),
                    "x2": _px(left + plot_w),
                    "y1": _px(y + lane_h),
                    "y2": _px(y + lane_h),
                    "stroke": "#eeeeee",
                },
            ),
        ]
        for i, window in enumerate(windows):
            value, whole = window.get(category) or 0.0, window.get("lifetime_chip_h") or 0.0
            if value <= 0 or whole <= 0:
                continue
            shapes.append(
                Shape(
                    "rect",
                    {
                        "x": _px(left + i * cell),
                        "y": y + 2,
                        "width": _px(max(cell * value / whole, 0.8)),
                        "height": lane_h - 4,
                        "fill": CATEGORY_COLOURS.get(category, PALETTE[0]),
                    },
                    tip=f"{window['window']} {category}: {value:,.2f} chip-h ({value / whole:.0%})",
                    mark=True,
                )
            )
    label_w = text_px("01-01 00:00") + 8
    every = max(1, math.ceil(label_w / cell))
    for i, window in enumerate(windows):
        if i % every == 0:
            text = (
                window["window"][11:16]
                if i and window["window"][:10] == windows[i - every]["window"][:10]
                else window["window"][5:10] + " " + window["window"][11:16]
            )
            shapes += [
                Shape(
                    "line",
                    {
                        "x1": _px(left + i * cell),
                        "x2": _px(left + i * cell),
                        "y1": top,
                        "y2": height - 26,
                        "stroke": "#cccccc",
                    },
                ),
                Shape("text", {"x": _px(left + i * cell), "y": height - 10}, text),
            ]
    return Chart(name, title, width, height, shapes)
