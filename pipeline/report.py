"""`voxrelay report traces.jsonl -o report.html`: latency report of a trace file.

A self-contained HTML page (inline CSS and SVG: it fetches nothing, so it can be mailed
or attached to a CI run) with TTFA p50/p95/p99, a TTFA histogram and a waterfall per
utterance drawn from the trace's own stamps, plus `report.png` (the same summary, drawn
with matplotlib) next to it. `docs/traces.md` says what each field means.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voxrelay.pipeline.trace import STAGE_INTERVALS, stage_intervals

PERCENTILES = (50, 95, 99)
# Stage -> bar colour; the same in the HTML and the PNG.
COLOURS = {
    "user.speech": "#9aa5b1",
    "asr.endpointing": "#4c78a8",
    "llm.ttft": "#f58518",
    "llm.decode": "#fbc98a",
    "tts.first_audio": "#54a24b",
    "tts.synthesis": "#a6d49f",
    "pipeline.out": "#b279a2",
    "playback": "#72b7b2",
}
assert set(COLOURS) == {name for name, _, _ in STAGE_INTERVALS} | {"playback"}

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
.turn { margin: 1.2em 0; }
.turn p { margin: 0.2em 0; }
.legend span { display: inline-block; margin-right: 1em; }
.legend i { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.3em; }
.error { color: #b00020; }
"""


@dataclass(frozen=True, slots=True)
class Summary:
    turns: int
    ttfa_ms: list[float]  # of the turns that produced audio
    percentiles: dict[int, float]  # p -> ms; empty without any TTFA
    failed: int
    barged_in: int


def load_rows(path: Path) -> list[dict[str, Any]]:
    """Trace rows of a JSONL file; ValueError names the first line that is not one."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: not a JSON line: {exc}") from None
        if not isinstance(row, dict) or "turn" not in row:
            raise ValueError(f"{path}:{number}: not a voxrelay trace record (no 'turn')")
        rows.append(row)
    return rows


def summarize(rows: list[dict[str, Any]]) -> Summary:
    ttfa = [float(r["ttfa_ms"]) for r in rows if r.get("ttfa_ms") is not None]
    percentiles = {p: float(np.percentile(ttfa, p)) for p in PERCENTILES} if ttfa else {}
    return Summary(
        # A call's last key presses get a row of their own with no speech in it
        # (docs/traces.md, "Key presses"): not an utterance.
        turns=sum(1 for r in rows if r.get("speech_start_ns") or r.get("error")),
        ttfa_ms=ttfa,
        percentiles=percentiles,
        failed=sum(1 for r in rows if r.get("error")),
        barged_in=sum(1 for r in rows if r.get("barge_in_ns")),
    )


def histogram(ttfa_ms: list[float], bins: int = 20) -> tuple[list[int], list[float]]:
    """(counts, bin edges in ms)."""
    counts, edges = np.histogram(ttfa_ms, bins=min(bins, max(1, len(ttfa_ms))))
    return [int(c) for c in counts], [float(e) for e in edges]


def write_report(rows: list[dict[str, Any]], output: Path) -> tuple[Path, Path]:
    """Writes the HTML page and the PNG next to it; returns both paths."""
    from voxrelay.pipeline.report_png import draw_png

    summary = summarize(rows)
    png = output.with_suffix(".png")
    output.write_text(render_html(rows, summary, png.name), encoding="utf-8")
    draw_png(rows, summary, png)
    return output, png


def render_html(rows: list[dict[str, Any]], summary: Summary, png_name: str = "") -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>voxrelay latency report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>voxrelay latency report</h1>",
        f"<p>{summary.turns} utterances, {len(summary.ttfa_ms)} with reply audio, "
        f"{summary.failed} failed, {summary.barged_in} cut by barge-in. "
        "TTFA: end of the user's speech to the first reply sample leaving the pipeline "
        "(docs/traces.md).</p>",
        _percentile_table(summary),
        _histogram_svg(summary.ttfa_ms),
        _legend(),
    ]
    if png_name:
        parts.append(f"<p>The same summary as an image: {html.escape(png_name)}</p>")
    parts.append("<h2>Waterfall per utterance</h2>")
    parts += [_turn_html(row) for row in rows]
    parts.append("</body></html>")
    return "\n".join(parts)


def _percentile_table(summary: Summary) -> str:
    if not summary.percentiles:
        return "<p>No utterance produced reply audio: no TTFA to report.</p>"
    cells = "".join(f'<td id="ttfa-p{p}">{summary.percentiles[p]:.0f}</td>' for p in PERCENTILES)
    head = "".join(f"<th>p{p}</th>" for p in PERCENTILES)
    return f"<table><tr><th></th>{head}</tr><tr><th>TTFA (ms)</th>{cells}</tr></table>"


def _histogram_svg(ttfa_ms: list[float]) -> str:
    if not ttfa_ms:
        return ""
    counts, edges = histogram(ttfa_ms)
    width, height, pad = 600, 180, 30
    bar_w = (width - 2 * pad) / len(counts)
    peak = max(counts)
    bars = []
    for index, count in enumerate(counts):
        h = (height - 2 * pad) * count / peak
        x = pad + index * bar_w
        title = f"{edges[index]:.0f}-{edges[index + 1]:.0f} ms: {count}"
        bars.append(
            f'<rect x="{x:.1f}" y="{height - pad - h:.1f}" width="{bar_w - 1:.1f}" '
            f'height="{h:.1f}" fill="#4c78a8"><title>{title}</title></rect>'
        )
    labels = (
        f'<text x="{pad}" y="{height - 8}" font-size="11">{edges[0]:.0f} ms</text>'
        f'<text x="{width - pad}" y="{height - 8}" font-size="11" text-anchor="end">'
        f"{edges[-1]:.0f} ms</text>"
        f'<text x="{pad}" y="16" font-size="12">TTFA histogram ({len(ttfa_ms)} turns, '
        f"highest bar {peak})</text>"
    )
    return (
        f'<svg class="histogram" width="{width}" height="{height}" role="img">'
        f"{''.join(bars)}{labels}</svg>"
    )


def _legend() -> str:
    items = "".join(
        f'<span><i style="background:{colour}"></i>{name}</span>'
        for name, colour in COLOURS.items()
    )
    return f'<p class="legend">{items}</p>'


def _turn_html(row: dict[str, Any]) -> str:
    stages = stage_intervals(row)
    title = f"session {row.get('session')} turn {row.get('turn')}"
    facts = []
    for name in ("ttfa_ms", "endpoint_ms", "llm_ttft_ms", "tts_first_audio_ms"):
        if row.get(name) is not None:
            facts.append(f"{name}={row[name]:.0f}")
    if row.get("barge_in_ns"):
        facts.append(f"barged in after {row.get('audio_played_ms', 0):.0f} ms of audio")
    error = row.get("error")
    lines = [
        '<div class="turn">',
        f"<h3>{html.escape(title)}</h3>",
        f"<p>{html.escape(' '.join(facts))}</p>",
        f"<p>user: {html.escape(str(row.get('transcript', '')))}</p>",
        f"<p>reply: {html.escape(str(row.get('reply_text', '')))}</p>",
    ]
    if error:
        lines.append(f'<p class="error">error: {html.escape(str(error))}</p>')
    lines.append(_waterfall_svg(row, stages))
    lines.append("</div>")
    return "\n".join(lines)


def _waterfall_svg(row: dict[str, Any], stages: list[tuple[str, int, int]]) -> str:
    if not stages:
        return '<svg class="waterfall" width="0" height="0"></svg>'
    start = min(begin for _, begin, _ in stages)
    span_ns = max(end for _, _, end in stages) - start or 1
    width, label_w, row_h = 760, 130, 16
    scale = (width - label_w - 60) / span_ns
    height = row_h * len(stages) + 24
    items = []
    for index, (name, begin, end) in enumerate(stages):
        y = index * row_h + 4
        x = label_w + (begin - start) * scale
        w = max(1.0, (end - begin) * scale)
        ms = (end - begin) / 1e6
        items.append(
            f'<text x="0" y="{y + 11}" font-size="11">{name}</text>'
            f'<rect class="stage" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 4}" '
            f'fill="{COLOURS[name]}"><title>{name}: {ms:.0f} ms</title></rect>'
            f'<text x="{x + w + 4:.1f}" y="{y + 11}" font-size="10">{ms:.0f} ms</text>'
        )
    for field, colour in (("first_audio_out_ns", "#d62728"), ("barge_in_ns", "#000")):
        at = row.get(field)
        if at:
            x = label_w + (at - start) * scale
            items.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height - 20}" stroke="{colour}" '
                f'stroke-dasharray="3,2"><title>{field}</title></line>'
            )
    items.append(
        f'<text x="{label_w}" y="{height - 6}" font-size="10">0</text>'
        f'<text x="{width - 60}" y="{height - 6}" font-size="10" text-anchor="end">'
        f"{span_ns / 1e6:.0f} ms</text>"
    )
    return (
        f'<svg class="waterfall" width="{width}" height="{height}" role="img">'
        f"{''.join(items)}</svg>"
    )
