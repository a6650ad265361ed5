"""`report.png`: the latency report's summary drawn with matplotlib (Agg, no display).

Left: the TTFA histogram with p50/p95/p99 marked. Right: the waterfalls of the last
`MAX_WATERFALLS` utterances stacked, one band per utterance, time from its first stamp.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from voxrelay.pipeline.trace import stage_intervals

if TYPE_CHECKING:
    from voxrelay.pipeline.report import Summary

MAX_WATERFALLS = 40


def draw_png(rows: list[dict[str, Any]], summary: Summary, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    from matplotlib import pyplot as plt

    from voxrelay.pipeline.report import COLOURS, PERCENTILES, histogram

    shown = rows[-MAX_WATERFALLS:]
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(13, max(4.0, 0.28 * len(shown) + 1.5)), width_ratios=(1, 1.6)
    )
    if summary.ttfa_ms:
        counts, edges = histogram(summary.ttfa_ms)
        left.stairs(counts, edges, fill=True, color="#4c78a8")
        for p, style in zip(PERCENTILES, ("-", "--", ":"), strict=True):
            value = summary.percentiles[p]
            left.axvline(value, color="#d62728", linestyle=style, label=f"p{p} {value:.0f} ms")
        left.legend()
    left.set_title(f"TTFA, {len(summary.ttfa_ms)} turns")
    left.set_xlabel("ms")
    left.set_ylabel("turns")
    labelled: set[str] = set()
    for index, row in enumerate(shown):
        stages = stage_intervals(row)
        if not stages:
            continue
        start = min(begin for _, begin, _ in stages)
        band = len(shown) - 1 - index  # first utterance at the top
        for number, (name, begin, end) in enumerate(stages):
            height = 0.8 / len(stages)
            right.broken_barh(
                [((begin - start) / 1e6, (end - begin) / 1e6)],
                (band - 0.4 + number * height, height),
                color=COLOURS[name],
                label=None if name in labelled else name,
            )
            labelled.add(name)
    right.set_yticks(
        range(len(shown)), [f"{r.get('session')}/{r.get('turn')}" for r in reversed(shown)]
    )
    right.set_xlabel("ms from the utterance's first stamp")
    right.set_title(f"waterfall per utterance (session/turn, last {len(shown)})")
    right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
