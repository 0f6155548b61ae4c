"""Charts as inline SVG strings: no JavaScript library, nothing fetched, opens offline.

Each chart is an `<svg class="chart" data-chart=NAME>` whose drawn marks (bars,
lines, points) carry class "mark" and a `<title>` tooltip with the value, so a
browser test can count what was drawn and a reader can hover for numbers.
"""

from __future__ import annotations

from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79")
FACTOR_COLOURS = {"SG": "#1f77b4", "RG": "#2ca02c", "PG": "#9467bd", "MPG": "#d62728"}
_FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def _open(name: str, title: str, width: int, height: int) -> list[str]:
    return [f'<svg class="chart" data-chart="{escape(name)}" role="img" aria-label="{escape(title)}" '
            f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" {_FONT}>',
            f'<text x="4" y="14" font-weight="600">{escape(title)}</text>']


def _legend(names: list[str], colours: list[str], x: float, y: float) -> list[str]:
    parts = []
    for i, (name, colour) in enumerate(zip(names, colours)):
        parts.append(f'<rect x="{x}" y="{y + i * 16}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="{y + i * 16 + 9}">{escape(str(name))}</text>')
    return parts


def _percent_axis(left: float, top: float, width: float, height: float, y_max: float) -> list[str]:
    parts = []
    for k in range(5):
        value = y_max * k / 4
        y = top + height - height * k / 4
        parts.append(f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value:.0%}</text>')
    return parts


def line_chart(name: str, title: str, x_labels: list[str], series: dict[str, list[float | None]],
               colours: list[str] | None = None, width: int = 640, height: int = 240) -> str:
    """Ratios (0..1, or a little above) per x label, one line per series; gaps where a value is None."""
    colours = colours or [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    left, top, right, bottom = 48, 26, 150, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for points in series.values() for v in points if v is not None]
    y_max = max([1.0] + values)
    step = plot_w / max(1, len(x_labels) - 1)
    x_of = (lambda i: left + plot_w / 2) if len(x_labels) == 1 else (lambda i: left + i * step)
    parts = _open(name, title, width, height) + _percent_axis(left, top, plot_w, plot_h, y_max)
    every = max(1, len(x_labels) // 8)
    for i, label in enumerate(x_labels):
        if i % every == 0:
            parts.append(f'<text x="{x_of(i):.1f}" y="{height - 8}" text-anchor="middle">{escape(label)}</text>')
    for (series_name, points), colour in zip(series.items(), colours):
        coords = [(x_of(i), top + plot_h - plot_h * v / y_max, v) for i, v in enumerate(points) if v is not None]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in coords)
            parts.append(f'<polyline class="mark" points="{path}" fill="none" stroke="{colour}" stroke-width="2">'
                         f'<title>{escape(series_name)}</title></polyline>')
        for (x, y, v), label in zip(coords, [x_labels[i] for i, v in enumerate(points) if v is not None]):
            parts.append(f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">'
                         f'<title>{escape(series_name)} {escape(label)}: {v:.1%}</title></circle>')
    parts += _legend(list(series), colours, width - right + 12, top)
    return "\n".join(parts + ["</svg>"])


def grouped_bars(name: str, title: str, groups: list[str], series: dict[str, list[float | None]],
                 colours: list[str] | None = None, width: int = 640) -> str:
    """Ratios per group, one bar per series in each group (e.g. SG, RG, PG, MPG per accelerator)."""
    colours = colours or [FACTOR_COLOURS.get(s, PALETTE[i % len(PALETTE)]) for i, s in enumerate(series)]
    left, top, right, bottom, height = 48, 26, 90, 40, 240
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for points in series.values() for v in points if v is not None]
    y_max = max([1.0] + values)
    group_w = plot_w / max(1, len(groups))
    bar_w = group_w * 0.8 / max(1, len(series))
    parts = _open(name, title, width, height) + _percent_axis(left, top, plot_w, plot_h, y_max)
    for g, group in enumerate(groups):
        x0 = left + g * group_w + group_w * 0.1
        parts.append(f'<text x="{x0 + group_w * 0.4:.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                     f'{escape(_short(group, int(group_w / 7)))}</text>')
        for s, ((series_name, points), colour) in enumerate(zip(series.items(), colours)):
            value = points[g]
            if value is None:
                continue
            bar_h = plot_h * value / y_max
            parts.append(f'<rect class="mark" x="{x0 + s * bar_w:.1f}" y="{top + plot_h - bar_h:.1f}" '
                         f'width="{max(bar_w - 1, 1):.1f}" height="{bar_h:.1f}" fill="{colour}">'
                         f'<title>{escape(group)} {escape(series_name)}: {value:.1%}</title></rect>')
    parts += _legend(list(series), colours, width - right + 12, top)
    return "\n".join(parts + ["</svg>"])


def stacked_bars(name: str, title: str, labels: list[str], stacks: list[dict[str, float]], categories: list[str],
                 unit: str = "chip-h", width: int = 680, legend: bool = True) -> str:
    """Horizontal bars, one per label, split by category (e.g. a job's badput by cause)."""
    colours = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(categories)}
    used = [c for c in categories if any((stack.get(c) or 0) > 0 for stack in stacks)] if legend else []
    left, top, right, row_h = 130, 26, 190 if legend else 60, 20
    height = max(top + row_h * len(labels) + 30, top + 16 * len(used) + 10)
    plot_w = width - left - right
    total_max = max([sum((s.get(c) or 0) for c in categories) for s in stacks] + [1e-12])
    parts = _open(name, title, width, height)
    for i, (label, stack) in enumerate(zip(labels, stacks)):
        y = top + i * row_h
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{escape(_short(label, 18))}</text>')
        x = float(left)
        for category in categories:
            value = stack.get(category) or 0.0
            if value <= 0:
                continue
            bar_w = plot_w * value / total_max
            parts.append(f'<rect class="mark" x="{x:.1f}" y="{y + 2}" width="{max(bar_w, 0.5):.1f}" height="{row_h - 5}" '
                         f'fill="{colours[category]}"><title>{escape(label)} {escape(category)}: '
                         f'{value:,.2f} {unit}</title></rect>')
            x += bar_w
        total = sum((stack.get(c) or 0) for c in categories)
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 13}">{total:,.1f}</text>')
    parts += _legend(used, [colours[c] for c in used], width - right + 60, top)
    return "\n".join(parts + ["</svg>"])


def _short(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= max(limit, 4) else text[: max(limit, 4) - 1] + "…"
