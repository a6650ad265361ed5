"""Regenerate the README's numbers table from bench/results.json (never typed by hand)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"

ROWS: tuple[tuple[str, str], ...] = (
    ("TTFA p50, streaming pipeline, 300 ms end of turn (ms)", "e2e.ttfa_ms.p50.streaming"),
    ("TTFA p95, streaming pipeline, 300 ms end of turn (ms)", "e2e.ttfa_ms.p95.streaming"),
    (
        "TTFA p50, sequential yardstick: voxrelay's engines, no streaming (ms)",
        "e2e.ttfa_ms.p50.sequential",
    ),  # fmt: skip
    ("TTFA cut against sequential (%)", "e2e.ttfa_cut_pct"),
    ("TTFA p50, naive chain: the same models on stock runtimes (ms)", "e2e.ttfa_ms.p50.naive"),
    ("TTFA cut against the naive chain (%)", "e2e.ttfa_cut_pct.naive"),
    ("streaming: end of speech -> ASR final, p50 (ms)", "e2e.endpoint_ms.p50.streaming"),
    (
        "streaming: end of speech -> SpeculativeEnd (reply starts), p50 (ms)",
        "e2e.speculative_ms.p50.streaming",
    ),
    (
        "streaming: SpeculativeEnd -> LLM reply start, p50 (ms)",
        "e2e.reply_start_wait_ms.p50.streaming",
    ),
    ("streaming: reply start -> LLM first token, p50 (ms)", "e2e.llm_ttft_ms.p50.streaming"),
    ("streaming: first token -> TTS first audio, p50 (ms)", "e2e.tts_first_audio_ms.p50.streaming"),
    ("barge-in: user's speech start -> reply cleared at the sink, p50 (ms)", "e2e.barge_in_ms.p50"),
    (
        "barge-in, min words 0 (cut at once): speech start -> reply stopped, p50 (ms)",
        "barge_in.stop_ms.p50.interruption.words0",
    ),
    (
        "barge-in, min words 1 (paused while the words decide): the same, p50 (ms)",
        "barge_in.stop_ms.p50.interruption.words1",
    ),
    ("'Okay.' over a reply, min words 0: replies cut (of 3)", "barge_in.cut.backchannel.words0"),
    ("'Okay.' over a reply, min words 1: replies cut (of 3)", "barge_in.cut.backchannel.words1"),
    (
        "'Okay.' over a reply, min words 1: reply held, then resumed, p50 (ms)",
        "barge_in.held_ms.p50.backchannel.words1",
    ),
    ("WebSocket TTFA p50, 1 session (ms)", "ws.ttfa_ms.p50.1"),
    ("WebSocket TTFA p95, 1 session (ms)", "ws.ttfa_ms.p95.1"),
    ("WebSocket TTFA p50, 4 concurrent sessions (ms)", "ws.ttfa_ms.p50.4"),
    ("WebSocket TTFA p95, 4 concurrent sessions (ms)", "ws.ttfa_ms.p95.4"),
    ("SIP TTFA p50, 1 call (ms; to the first reply RTP packet)", "sip.ttfa_ms.p50.1"),
    ("SIP TTFA p50, 4 concurrent calls (ms)", "sip.ttfa_ms.p50.4"),
    (
        "SIP bridge: pipeline's first reply sample -> first RTP packet, p50 (ms)",
        "sip.rtp_out_ms.p50.1",
    ),
    ("ASR tiny.en: end of speech -> Final, p50 (ms)", "asr.final_ms.p50.tiny.en"),
    ("ASR tiny.en: end of speech -> SpeculativeEnd, p50 (ms)", "asr.speculative_ms.p50.tiny.en"),
    (
        "ASR tiny.en, CTranslate2's text decoder: -> SpeculativeEnd, p50 (ms)",
        "asr.speculative_ms.p50.tiny.en.ctranslate2",
    ),
    (
        "ASR SpeculativeEnd p50, native text decoder / CTranslate2's",
        "asr.native_over_ctranslate2.speculative_ms.p50",
    ),
    ("ASR WER of the streamed clips (partials on), tiny.en", "asr.wer_realtime.tiny.en"),
    ("ASR WER of the streamed clips (partials on), base", "asr.wer_realtime.base"),
    (
        "turn-taking, natural speech: mid-turn pauses ended on, learned end, medium (%)",
        "turn_end.false_cut_pct.natural",
    ),
    ("... mean wait after true ends, learned end (ms)", "turn_end.mean_wait_ms.natural"),
    ("... pauses ended on, VAD silence alone, 300 ms (%)", "turn_end.false_cut_pct.natural.vad"),
    ("... mean wait, VAD silence alone (ms)", "turn_end.mean_wait_ms.natural.vad"),
    ("... pauses ended on, words' rule + 300 ms (%)", "turn_end.false_cut_pct.natural.rules"),
    ("... mean wait, words' rule + 300 ms (ms)", "turn_end.mean_wait_ms.natural.rules"),
    ("... pauses ended on, Smart Turn alone (%)", "turn_end.false_cut_pct.natural.smart_turn"),
    ("... mean wait, Smart Turn alone (ms)", "turn_end.mean_wait_ms.natural.smart_turn"),
    (
        "... pauses ended on, learned end with no LLM probability (%)",
        "turn_end.false_cut_pct.natural.learned_no_llm",
    ),
    (
        "... mean wait, learned end with no LLM probability (ms)",
        "turn_end.mean_wait_ms.natural.learned_no_llm",
    ),
    ("turn-taking, spliced pauses: ended on, learned end (%)", "turn_end.false_cut_pct.splice"),
    ("... mean wait after true ends, learned end (ms)", "turn_end.mean_wait_ms.splice"),
    ("... ended on, VAD silence alone (%)", "turn_end.false_cut_pct.splice.vad"),
    ("... ended on, Smart Turn alone (%)", "turn_end.false_cut_pct.splice.smart_turn"),
    (
        "... ended on, learned end with no LLM probability (%)",
        "turn_end.false_cut_pct.splice.learned_no_llm",
    ),
    (
        "turn-taking, a lecturer holding the floor: pauses ended on, learned end (%)",
        "turn_end.false_cut_pct.lecture",
    ),
    ("... ended on, VAD silence alone (%)", "turn_end.false_cut_pct.lecture.vad"),
    ("... ended on, words' rule + 300 ms (%)", "turn_end.false_cut_pct.lecture.rules"),
    (
        "... ended on, learned end with no LLM probability (%)",
        "turn_end.false_cut_pct.lecture.learned_no_llm",
    ),
    (
        "turn-taking, unscripted talk (uh, um): pauses ended on, learned end (%)",
        "turn_end.false_cut_pct.unscripted",
    ),
    ("... ended on, VAD silence alone (%)", "turn_end.false_cut_pct.unscripted.vad"),
    ("... ended on, words' rule + 300 ms (%)", "turn_end.false_cut_pct.unscripted.rules"),
    (
        "... ended on, learned end without the speaker's own pauses (%)",
        "turn_end.false_cut_pct.unscripted.learned_no_habit",
    ),
    ("... mean wait after the 3 true ends, learned end (ms)", "turn_end.mean_wait_ms.unscripted"),
    (
        "... mean wait, learned end without the speaker's own pauses (ms)",
        "turn_end.mean_wait_ms.unscripted.learned_no_habit",
    ),
    (
        "turn-taking, speech phenomena (fillers, laughter, cut-off words): pauses ended on, "
        "learned end (%)",
        "turn_end.false_cut_pct.phenomena",
    ),
    ("... ended on, VAD silence alone (%)", "turn_end.false_cut_pct.phenomena.vad"),
    ("... ended on, words' rule + 300 ms (%)", "turn_end.false_cut_pct.phenomena.rules"),
    ("... ended on, Smart Turn alone (%)", "turn_end.false_cut_pct.phenomena.smart_turn"),
    ("... mean wait after the true ends, learned end (ms)", "turn_end.mean_wait_ms.phenomena"),
    ("... mean wait, VAD silence alone (ms)", "turn_end.mean_wait_ms.phenomena.vad"),
    ("... mean wait, Smart Turn alone (ms)", "turn_end.mean_wait_ms.phenomena.smart_turn"),
    (
        "turn-taking, every real mid-turn pause (natural, lecture, unscripted, phenomena): "
        "ended on, learned end (%)",
        "turn_end.false_cut_pct.real_speech",
    ),
    ("... ended on, VAD silence alone (%)", "turn_end.false_cut_pct.real_speech.vad"),
    (
        "... ended on, learned end without the speaker's own pauses (%)",
        "turn_end.false_cut_pct.real_speech.learned_no_habit",
    ),
    (
        "turn-taking, spoken requests (synthetic): mean wait, learned end (ms)",
        "turn_end.mean_wait_ms.requests",
    ),
    ("... mean wait, VAD silence alone (ms)", "turn_end.mean_wait_ms.requests.vad"),
    ("turn-end decision CPU time in the ASR, p50 (ms)", "turn_end.decision_ms.p50"),
    ("Smart Turn alone, shipped int8 graph, p50 (ms)", "turn_end.smart_turn_ms.p50.shipped"),
    (
        "Smart Turn alone, float softmax (the default), p50 (ms)",
        "turn_end.smart_turn_ms.p50.float_softmax",
    ),
    ("natural turns kept whole through the pipeline, learned end (%)", "e2e.natural.whole_pct"),
    ("TTFA p50 at natural turns' true ends, learned end (ms)", "e2e.ttfa_ms.p50.natural"),
    (
        "... the same, ASR threads spinning ~1 ms (`voxrelay run`, `mic`) (ms)",
        "e2e.ttfa_ms.p50.natural.asr_spin",
    ),
    ("... spin / passive", "e2e.asr_spin_over_passive.natural_p50"),
    (
        "... SpeculativeEnd p50 after the speech, passive (ms)",
        "e2e.speculative_ms.p50.natural",
    ),
    ("... SpeculativeEnd p50 with the spin (ms)", "e2e.speculative_ms.p50.natural.asr_spin"),
    ("TTFA p50, the 8 clips with the learned end (ms)", "e2e.ttfa_ms.p50.learned"),
    ("ASR base: end of speech -> Final, p50 (ms)", "asr.final_ms.p50.base"),
    ("ASR base: end of speech -> SpeculativeEnd, p50 (ms)", "asr.speculative_ms.p50.base"),
    (
        "ASR base, bfloat16 encoder: -> SpeculativeEnd, p50 (ms)",
        "asr.speculative_ms.p50.base.bfloat16_encoder",
    ),
    (
        "ASR base SpeculativeEnd p50, bfloat16 encoder / CTranslate2's int8",
        "asr.bfloat16_over_ctranslate2_encoder.speculative_ms.p50",
    ),
    (
        "ASR base RTF, bfloat16 encoder / CTranslate2's int8",
        "asr.bfloat16_over_ctranslate2_encoder.rtf",
    ),
    ("ASR WER, base, bfloat16 encoder", "asr.wer.base.bfloat16_encoder"),
    ("CPU has AMX (1) for the bfloat16 encoder", "asr.cpu_has_amx"),
    ("ASR real-time factor, tiny.en", "asr.rtf.tiny.en"),
    ("ASR real-time factor, base", "asr.rtf.base"),
    ("ASR WER, tiny.en", "asr.wer.tiny.en"),
    ("ASR WER, base", "asr.wer.base"),
    ("LLM decode, native engine, default: GGUF blocks (tok/s)", "llm.decode_tok_s.native"),
    (
        "LLM decode, the same on 1 thread, as the stage decodes (tok/s)",
        "llm.decode_tok_s.native_1thread",
    ),
    ("LLM decode, 1 thread / 2 threads", "llm.decode_1thread_over_2threads"),
    ("LLM decode, native engine, bf16 decode weights (tok/s)", "llm.decode_tok_s.native_bf16"),
    ("LLM decode, native engine, fp32 decode weights (tok/s)", "llm.decode_tok_s.native_fp32"),
    ("LLM decode, HF transformers, same GGUF (tok/s)", "llm.decode_tok_s.hf"),
    ("LLM decode speed-up vs HF transformers (x)", "llm.decode_speedup_vs_hf"),
    ("LLM TTFT, prompt prefilled while the user speaks (ms)", "llm.ttft_ms.incremental"),
    ("LLM TTFT, cold prefill of the whole prompt (ms)", "llm.ttft_ms.cold"),
    ("LLM TTFT incremental / cold", "llm.ttft_incremental_over_cold"),
    ("LLM TTFT incremental, bf16 decode weights (ms)", "llm.ttft_ms.incremental_bf16"),
    ("TTS first token -> first audio p50, partial input (ms)", "tts.first_audio_ms.p50.partial"),
    ("TTS first token -> first audio p50, whole sentence (ms)", "tts.first_audio_ms.p50.sentence"),
    ("TTS first audio, partial / sentence", "tts.first_audio_partial_over_sentence"),
    (
        "TTS first token -> first audio p50, vocoder on whole sentences (ms)",
        "tts.first_audio_ms.p50.partial_whole",
    ),
    ("TTS first audio, vocoder in chunks / whole", "tts.first_audio_chunked_over_whole"),
    (
        "TTS stage first audio p50, first fragment ahead of its cut (ms)",
        "tts.first_audio_ms.p50.ahead",
    ),
    ("TTS stage first audio p50, fragment after its cut (ms)", "tts.first_audio_ms.p50.stage"),
    ("TTS stage first audio, ahead / after the cut", "tts.first_audio_ahead_over_stage"),
    ("TTS real-time factor", "tts.rtf"),
    ("ring one-way latency p50, 640 B (us)", "ipc.ring.p50_us.640"),
    ("pyzmq ipc one-way latency p50, 640 B (us)", "ipc.zmq.p50_us.640"),
    ("pyzmq + JSON one-way latency p50, 640 B (us)", "ipc.zmq_json.p50_us.640"),
    ("multiprocessing.Queue one-way latency p50, 640 B (us)", "ipc.mp_queue.p50_us.640"),
    ("pyzmq + JSON p50 / ring p50, 640 B", "ipc.zmq_json_over_ring.p50.640"),
    ("ring p50, 640 B, receiver on the sender's CPU (us)", "ipc.ring.p50_us.640.same_cpu"),
    ("ring p50, 640 B, receiver on the other CPU (us)", "ipc.ring.p50_us.640.other_cpu"),
    ("ring consumer idle, no traffic (% of a core)", "ipc.ring.idle_cpu_pct"),
)


def render(results: dict[str, float]) -> str:
    lines = [START, "", "| figure | value | key in bench/results.json |", "|---|---:|---|"]
    for label, key in ROWS:
        if key in results:
            lines.append(f"| {label} | {results[key]:g} | `{key}` |")
    lines += ["", "All figures: `bench/results.json`, written by `make bench`.", "", END]
    return "\n".join(lines)


def update(results: dict[str, float]) -> None:
    text = README.read_text()
    if START not in text or END not in text:
        print(f"README has no {START} ... {END} block; table not written", file=sys.stderr)
        return
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(head + render(results) + tail)


if __name__ == "__main__":
    update(json.loads((Path(__file__).with_name("results.json")).read_text()))
