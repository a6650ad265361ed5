"""docs/traces.md documents every field a trace record carries, and nothing more."""

import json
import re
from pathlib import Path

from voxrelay.ipc.records import Stamp
from voxrelay.pipeline.trace import TurnTrace

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "fixtures" / "traces.jsonl"


def _documented() -> set[str]:
    text = (ROOT / "docs" / "traces.md").read_text()
    # First cell of a table row: | `name` | type | meaning |
    return set(re.findall(r"^\| `([a-z_]+)` \| (?:int|float|str|bool) \|", text, re.MULTILINE))


def _full_trace() -> TurnTrace:
    trace = TurnTrace(3, 7, "websocket", "streaming", asr_model="tiny.en", llm_model="smollm2")
    for offset, point in enumerate(Stamp):
        trace.mark(point, 1_000_000_000 + offset * 1_000_000)
    trace.first_audio_out_ns = 1_100_000_000
    trace.barge_in_ns = 1_200_000_000
    trace.audio_out_samples, trace.audio_out_rate = 22050, 22050
    trace.error = "tts stage process exited"
    trace.add_dtmf("5", 1_050_000_000)
    return trace


def test_every_written_field_is_documented_and_every_documented_field_written():
    written = set(_full_trace().to_dict())
    documented = _documented()
    assert written - documented == set(), "fields missing from docs/traces.md"
    assert documented - written == set(), "docs/traces.md documents fields no longer written"


def test_fixture_rows_from_a_real_run_carry_only_documented_fields():
    """(A fixture captured before a field was added lacks it; nothing else may differ.)"""
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert rows
    for row in rows:
        assert set(row) <= _documented()


def test_audio_played_stops_at_the_barge_in():
    trace = _full_trace()
    row = trace.to_dict()
    assert row["audio_out_ms"] == 1000.0
    assert row["audio_played_ms"] == 100.0  # cut 100 ms after the first sample left
    trace.barge_in_ns = 0
    assert trace.to_dict()["audio_played_ms"] == 1000.0
