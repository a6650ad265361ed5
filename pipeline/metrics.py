"""Prometheus metrics of a running pipeline, served at `GET /metrics` by `voxrelay serve`.

Turn-level figures (TTFA and stage latency histograms, turn, barge-in and error
counters) are fed by the trace rows: `observe_turn` is a `TraceSink` observer, so the
metrics and the JSONL trace are the same numbers. Process-level counters (stage
restarts, records dropped by full rings, reply audio dropped for slow clients) are read
from their owners at scrape time, so nothing on the data path counts twice.
Each server has its own `CollectorRegistry`: two servers in one process do not mix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.supervisor import STAGES

# Seconds; dense where TTFA lives on a CPU (0.3-3 s), a tail up to a stuck stage.
LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
# Histogram label -> trace row field (milliseconds).
STAGE_FIELDS = {
    "endpoint": "endpoint_ms",
    "asr_decode": "asr_decode_ms",
    "llm_ttft": "llm_ttft_ms",
    "llm_total": "llm_total_ms",
    "tts_first_audio": "tts_first_audio_ms",
    "out": "out_ms",
}
ClientDrops = Callable[[], dict[str, int]]


class PipelineMetrics:
    """One registry per server. `client_drops` returns bytes dropped per direction
    ("input", "reply") by the transport, summed over its clients past and present."""

    def __init__(self, pipeline: Pipeline, client_drops: ClientDrops | None = None) -> None:
        self.registry = CollectorRegistry()
        self.ttfa = Histogram(
            "voxrelay_ttfa_seconds",
            "End of the user's speech to the first reply sample leaving the pipeline",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.stage_latency = Histogram(
            "voxrelay_stage_latency_seconds",
            "Per-stage latency of a turn (docs/traces.md: the *_ms fields)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.turns = Counter(
            "voxrelay_turns",
            "Finished turns by outcome (completed, failed, barged_in, backchannel)",
            ["outcome"],
            registry=self.registry,
        )
        self.barge_ins = Counter(
            "voxrelay_barge_ins", "Replies cut by the user speaking", registry=self.registry
        )
        self.errors = Counter(
            "voxrelay_turn_errors",
            "Turns that failed (a stage error or crash)",
            ["transport"],
            registry=self.registry,
        )
        for outcome in ("completed", "failed", "barged_in", "backchannel"):
            self.turns.labels(outcome)  # exported at 0 before the first turn
        self.registry.register(_LiveCounters(pipeline, client_drops))

    def observe_turn(self, row: dict[str, Any]) -> None:
        if row.get("error"):
            self.turns.labels("failed").inc()
            self.errors.labels(str(row.get("transport", ""))).inc()
            return
        if row.get("backchannel"):  # "mm-hmm" over a reply: no reply of its own
            self.turns.labels("backchannel").inc()
            return
        if row.get("barge_in_ns"):
            self.turns.labels("barged_in").inc()
            self.barge_ins.inc()
        else:
            self.turns.labels("completed").inc()
        if row.get("ttfa_ms") is not None:
            self.ttfa.observe(row["ttfa_ms"] / 1000)
        for stage, name in STAGE_FIELDS.items():
            value = row.get(name)
            if value is not None and (value > 0 or name != "asr_decode_ms"):
                self.stage_latency.labels(stage).observe(value / 1000)

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of the text exposition format."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _LiveCounters(Collector):
    """Counters owned elsewhere, read when Prometheus scrapes."""

    def __init__(self, pipeline: Pipeline, client_drops: ClientDrops | None) -> None:
        self._pipeline = pipeline
        self._client_drops = client_drops

    def collect(self) -> Iterator[Metric]:
        supervisor = self._pipeline.supervisor
        restarts = CounterMetricFamily(
            "voxrelay_stage_restarts",
            "Stage processes restarted (crash, kill, stall)",
            labels=["stage"],
        )
        ready = GaugeMetricFamily(
            "voxrelay_stage_ready", "1 while the stage is up", labels=["stage"]
        )
        standby = GaugeMetricFamily(
            "voxrelay_standby_ready",
            "1 while the stage has a warm standby with its models loaded",
            labels=["stage"],
        )
        for stage in STAGES:
            restarts.add_metric([stage], supervisor.restarts(stage))
            ready.add_metric([stage], 1.0 if supervisor.is_ready(stage) else 0.0)
            standby.add_metric([stage], 1.0 if supervisor.standby_ready(stage) else 0.0)
        malformed = CounterMetricFamily(
            "voxrelay_malformed_records",
            "Records from a stage that did not parse (dropped; a corrupt ring restarts it)",
            labels=["stage"],
        )
        for stage, count in supervisor.malformed_records.items():
            malformed.add_metric([stage], count)
        yield restarts
        yield ready
        yield standby
        yield malformed
        drops = CounterMetricFamily(
            "voxrelay_ring_dropped_records",
            "Records a ring's producer dropped because the ring was full",
            labels=["ring"],
        )
        for ring, dropped in supervisor.ring_drops().items():
            drops.add_metric([ring], dropped)
        yield drops
        sessions = GaugeMetricFamily("voxrelay_sessions", "Open sessions")
        sessions.add_metric([], len(self._pipeline.router.sessions))
        yield sessions
        if self._client_drops is not None:
            client = CounterMetricFamily(
                "voxrelay_client_dropped_audio_bytes",
                "Audio bytes dropped at the transport: input (ring full), reply (slow client)",
                labels=["direction"],
            )
            for direction, count in self._client_drops().items():
                client.add_metric([direction], count)
            yield client
