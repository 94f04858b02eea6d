"""A plain-text chart of throughput against read-ahead, one marker per scheduler.

Read-ahead values are spaced evenly (a sweep doubles them, so this is a log
axis); throughput is linear from zero, so a flat plateau looks flat.
"""

from __future__ import annotations

from tunectl.bench.results import Summary

MARKERS = "*o+x%&"
OVERLAP = "#"


def _fmt_kib(kib: int) -> str:
    if kib >= 1024 and kib % 1024 == 0:
        return f"{kib // 1024}M"
    return f"{kib}K" if kib else "0"


def render(summaries: list[Summary], height: int = 11, col: int = 6) -> str:
    if not summaries:
        return "(no points)"
    xs = sorted({s.read_ahead_kb for s in summaries})
    series: list[str | None] = []
    for s in summaries:
        if s.scheduler not in series:
            series.append(s.scheduler)
    top = max(s.mb_s for s in summaries) or 1.0
    grid = [[" "] * (len(xs) * col) for _ in range(height)]
    for s in summaries:
        i = series.index(s.scheduler)
        mark = MARKERS[i % len(MARKERS)]
        row = height - 1 - round(s.mb_s / top * (height - 1))
        x = xs.index(s.read_ahead_kb) * col + col // 2
        cell = grid[row][x]
        grid[row][x] = mark if cell in (" ", mark) else OVERLAP
    label_w = len(f"{top:.0f}")
    lines = ["MB/s"]
    for r, cells in enumerate(grid):
        value = top * (height - 1 - r) / (height - 1)
        label = f"{value:.0f}" if r in (0, height // 2, height - 1) else ""
        lines.append(f"{label:>{label_w}} |" + "".join(cells).rstrip())
    lines.append(" " * label_w + " +" + "-" * (len(xs) * col))
    lines.append(" " * label_w + "  " + "".join(_fmt_kib(x).center(col) for x in xs).rstrip() + "  read_ahead_kb")
    legend = "  ".join(f"{MARKERS[i % len(MARKERS)]} {name or 'no scheduler'}" for i, name in enumerate(series))
    if len(series) > 1:
        legend += f"  {OVERLAP} several"
    lines.append(" " * label_w + "  " + legend)
    return "\n".join(lines)
