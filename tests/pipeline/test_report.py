"""`voxrelay report`: HTML page and PNG from traces captured from a real run."""

import json
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

from voxrelay.pipeline.report import PERCENTILES, load_rows, render_html, summarize

FIXTURE = Path(__file__).parent / "fixtures" / "traces.jsonl"
VOID = {"meta", "br", "img", "input", "link", "hr"}


class _Checker(HTMLParser):
    """Tag balance (a parse that would silently repair is a failure here) and counts."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.classes: list[str] = []
        self.ids: dict[str, str] = {}
        self._id: str | None = None
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for name in ("src", "href"):
            if attributes.get(name):
                self.external.append(attributes[name])
        if tag not in VOID:
            self.stack.append(tag)
        self.classes.append(f"{tag}.{attributes.get('class', '')}")
        self._id = attributes.get("id")

    def handle_startendtag(self, tag, attrs):
        self.classes.append(f"{tag}.{dict(attrs).get('class', '')}")

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-3:])
        self.stack.pop()

    def handle_data(self, data):
        if self._id:
            self.ids[self._id] = data
            self._id = None


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_cli_writes_a_self_contained_page_and_a_png(tmp_path):
    traces = tmp_path / "traces.jsonl"
    shutil.copy(FIXTURE, traces)
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "report", str(traces), "-o", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    text = page.read_text()
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert checker.stack == [], "unclosed tags"
    assert checker.external == [] and "http" not in text and "url(" not in text
    assert checker.classes.count("svg.waterfall") == len(rows) == 3
    assert checker.classes.count("svg.histogram") == 1
    ttfa = [r["ttfa_ms"] for r in rows]
    for p in PERCENTILES:
        assert float(checker.ids[f"ttfa-p{p}"]) == round(float(np.percentile(ttfa, p)))
    for row in rows:
        assert f"session {row['session']} turn {row['turn']}" in text
    assert "barged in after" in text  # the fixture's second turn was cut
    width, height = _png_size(page.with_suffix(".png"))
    assert 800 <= width <= 3000 and 300 <= height <= 3000, (width, height)


def test_failed_and_empty_turns_still_render():
    rows = load_rows(FIXTURE)
    failed = {k: None for k in rows[0]} | {
        "session": 9,
        "turn": 4,
        "error": "tts <stage> exited",
        "transcript": "",
    }
    summary = summarize([*rows, failed])
    assert summary.failed == 1 and summary.barged_in == 1 and len(summary.ttfa_ms) == 3
    text = render_html([*rows, failed], summary)
    assert "tts &lt;stage&gt; exited" in text  # escaped, never raw markup
    assert text.count('class="waterfall"') == 4
    assert "no TTFA" in render_html([failed], summarize([failed]))


def test_a_file_that_is_not_traces_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"turn": 1}\nnot json\n')
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "voxrelay.pipeline.cli",
            "report",
            str(bad),
            "-o",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "bad.jsonl:2: not a JSON line" in done.stderr


def test_a_calls_key_press_row_is_not_counted_as_an_utterance() -> None:
    rows = load_rows(FIXTURE)
    keys_only = {key: None for key in rows[0]}
    keys_only.update(session=1, turn=len(rows), transcript="", dtmf="#",
                     dtmf_first_ns=rows[-1]["speech_end_ns"])  # fmt: skip
    summary = summarize([*rows, keys_only])
    assert summary.turns == len(rows) == summarize(rows).turns
    assert summary.ttfa_ms == summarize(rows).ttfa_ms
