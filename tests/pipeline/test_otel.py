"""OpenTelemetry: turn spans from real traces, in memory and over real OTLP/HTTP."""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402

from voxrelay.pipeline.otel import TurnSpans, exporter_from_env  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "traces.jsonl"
ROOT = Path(__file__).resolve().parents[2]


def _rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def test_a_span_per_turn_with_a_child_per_stage_at_the_real_stamps():
    exporter = InMemorySpanExporter()
    spans = TurnSpans(exporter, batch=False)
    rows = _rows()
    for row in rows:
        spans.export_turn(row)
    spans.shutdown()
    finished = exporter.get_finished_spans()
    turns = [s for s in finished if s.name == "voxrelay.turn"]
    assert len(turns) == len(rows)
    for row, turn in zip(rows, turns, strict=True):
        children = {
            s.name: s for s in finished if s.parent and s.parent.span_id == turn.context.span_id
        }
        assert {"user.speech", "asr.endpointing", "llm.ttft", "tts.first_audio"} <= set(children)
        assert turn.context.trace_id == children["llm.ttft"].context.trace_id
        for name, field in (
            ("asr.endpointing", "endpoint_ms"),
            ("llm.ttft", "llm_ttft_ms"),
            ("tts.first_audio", "tts_first_audio_ms"),
        ):
            span = children[name]
            assert abs((span.end_time - span.start_time) / 1e6 - row[field]) < 0.01, name
        # Children sit inside their turn, and the TTFA is the distance from the end of
        # speech to the audio leaving the pipeline, as in the trace.
        for child in children.values():
            assert turn.start_time <= child.start_time <= child.end_time <= turn.end_time
        out = children["pipeline.out"]
        ttfa = (out.end_time - children["user.speech"].end_time) / 1e6
        assert abs(ttfa - row["ttfa_ms"]) < 0.01
        assert turn.attributes["ttfa_ms"] == row["ttfa_ms"]
        assert turn.attributes["llm_model"] == row["llm_model"]
        playback = children["playback"]
        assert abs((playback.end_time - playback.start_time) / 1e6 - row["audio_played_ms"]) < 0.01
        assert turn.attributes.get("barge_in", False) == bool(row["barge_in_ns"])
    assert any(t.attributes.get("barge_in") for t in turns), "the fixture holds a barge-in"


def test_a_failed_turn_has_an_error_status():
    exporter = InMemorySpanExporter()
    spans = TurnSpans(exporter, batch=False)
    row = dict(_rows()[0], error="tts stage process exited with code -9")
    spans.export_turn(row)
    turn = next(s for s in exporter.get_finished_spans() if s.name == "voxrelay.turn")
    assert turn.status.status_code == StatusCode.ERROR
    assert "tts stage" in turn.status.description


def test_nothing_is_imported_without_the_variables():
    code = (
        "import sys; import voxrelay.pipeline.run; "
        "from voxrelay.pipeline.otel import exporter_from_env; "
        "assert exporter_from_env() is None; "
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'"
    )
    env = {"PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=60)
    assert exporter_from_env({}) is None


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_standard_variable_sends_the_turns_over_otlp_http():
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        # The SDK reads the variable itself: the process environment is what counts.
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            spans = exporter_from_env()
            assert spans is not None
            for row in _rows():
                spans.export_turn(row)
            spans.shutdown()  # flushes the batch
    finally:
        server.shutdown()
    paths = {path for path, _ in _Collector.received}
    assert paths == {"/v1/traces"}
    names = []
    for _, body in _Collector.received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert service["service.name"] == "voxrelay"
            for scope in resource.scope_spans:
                names += [span.name for span in scope.spans]
    assert names.count("voxrelay.turn") == len(_rows())
    assert "llm.ttft" in names


def test_without_the_extra_the_variable_only_warns(monkeypatch, caplog):
    # None in sys.modules makes the import fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    assert exporter_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}) is None
    assert "pip install 'voxrelay[otel]'" in caplog.text
