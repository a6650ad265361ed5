"""OpenTelemetry export of turn traces: one span per turn, a child span per stage.

Optional (the `otel` extra). Nothing is imported and nothing runs unless an OTLP
endpoint is configured through the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); the SDK itself reads those and the rest
(`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, ...). Spans are built after the
turn has finished, from the trace row's monotonic stamps: the hot path never touches
the SDK, and a slow collector costs no latency (the batch processor exports from its
own thread).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from voxrelay.pipeline.trace import stage_intervals

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("voxrelay.otel")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

# Row fields copied onto a stage span (the spans are `pipeline.trace.STAGE_INTERVALS`).
SPAN_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "user.speech": ("prefill_early_tokens",),
    "asr.endpointing": ("asr_decode_ms", "asr_model"),
    "llm.ttft": ("prefill_tokens", "prefill_late_tokens"),
    "llm.decode": ("llm_model",),
    "tts.first_audio": ("tts_voice",),
    "playback": ("audio_played_ms",),
}
TURN_ATTRIBUTES = (
    "session",
    "turn",
    "transport",
    "mode",
    "asr_model",
    "llm_model",
    "tts_voice",
    "endpoint_ms",
    "speculative_ms",
    "llm_ttft_ms",
    "llm_total_ms",
    "tts_first_audio_ms",
    "ttfa_ms",
    "audio_out_ms",
    "audio_played_ms",
    "prefill_tokens",
    "prefill_early_tokens",
    "speculative_retracts",
    "end_holds",
)
# Transcripts and replies stay out of spans: a tracing backend is no place for speech.


def exporter_from_env(environ: Mapping[str, str] | None = None) -> TurnSpans | None:
    """A `TurnSpans` exporting over OTLP/HTTP, or None when no endpoint is configured
    or the `otel` extra is not installed (then a warning says so)."""
    variables = os.environ if environ is None else environ
    if not any(variables.get(name) for name in ENDPOINT_VARIABLES):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning(
            "%s is set but OpenTelemetry is not installed: pip install 'voxrelay[otel]'",
            " or ".join(ENDPOINT_VARIABLES),
        )
        return None
    return TurnSpans(OTLPSpanExporter(), batch=True)


class TurnSpans:
    """Turns finished trace rows into spans; `export_turn` is a `TraceSink` observer."""

    def __init__(self, exporter: SpanExporter, batch: bool = True) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        # Resource.create() honours OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
        self._provider = TracerProvider(resource=Resource.create({"service.name": "voxrelay"}))
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("voxrelay.pipeline")
        # OTLP wants epoch times; the stamps are CLOCK_MONOTONIC. One offset, taken once,
        # maps them: durations stay exactly the monotonic ones.
        self._epoch_offset_ns = time.time_ns() - time.perf_counter_ns()

    def export_turn(self, row: dict[str, Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        stamps = [
            row[name]
            for name in row
            if name.endswith("_ns") and isinstance(row[name], int) and row[name] > 0
        ]
        if not stamps:
            return  # a turn that failed before any stage stamped it: nothing to place
        stages = stage_intervals(row)
        start_ns = min(stamps)
        end_ns = max([*stamps, *(end for _, _, end in stages)])
        attributes = {k: row[k] for k in TURN_ATTRIBUTES if row.get(k) not in (None, "")}
        if row.get("barge_in_ns"):
            attributes["barge_in"] = True
        turn = self._tracer.start_span(
            "voxrelay.turn", start_time=self._epoch(start_ns), attributes=attributes
        )
        if row.get("error"):
            turn.set_status(Status(StatusCode.ERROR, str(row["error"])))
        context = trace.set_span_in_context(turn)
        for name, begin, end in stages:
            keys = SPAN_ATTRIBUTES.get(name, ())
            self._child(name, context, begin, end, {k: row[k] for k in keys if row.get(k)})
        turn.end(end_time=self._epoch(end_ns))

    def _child(
        self, name: str, context: Any, begin_ns: int, end_ns: int, attributes: dict[str, Any]
    ) -> None:
        span = self._tracer.start_span(
            name, context=context, start_time=self._epoch(begin_ns), attributes=attributes
        )
        span.end(end_time=self._epoch(end_ns))

    def _epoch(self, monotonic_ns: int) -> int:
        return monotonic_ns + self._epoch_offset_ns

    def shutdown(self) -> None:
        """Flush spans still queued and stop the exporter."""
        self._provider.shutdown()
