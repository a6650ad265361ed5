"""GPU check of the native engine: CUDA-graph vs eager decode speed, and TTFT.

Run by scripts/gpu_check.sh on a lent GPU machine; prints one JSON object and writes it
to --out. Decode: greedy, bfloat16, DECODE_TOKENS tokens per request after the first,
for batches of 1 and 4 concurrent requests; the rate is tokens/s summed over the batch.
TTFT: the bench's dialogue (~330 tokens) cold (prefix cache off) and incremental (an
open prompt holds all but the last words; the clock runs from append + start_decode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from bench.llm import HISTORY, TAIL_WORDS, UTTERANCES
from voxrelay.llm.backend import REPLY_HEADER
from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine

DECODE_TOKENS = 128
REPEATS = 3


def _engine(model: Path, graphs: bool, prefix_caching: bool = True) -> LLMEngine:
    if not torch.cuda.is_available():  # --dry-run on a CPU: the code path, not the numbers
        return LLMEngine(LLMConfig(model, device="cpu", enable_prefix_caching=prefix_caching))
    config = LLMConfig(model, device="cuda", dtype="bfloat16", cuda_graphs=graphs,
                       enable_prefix_caching=prefix_caching)  # fmt: skip
    return LLMEngine(config)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _history() -> list[dict[str, str]]:
    return [{"role": role, "content": text} for pair in HISTORY
            for role, text in zip(("user", "assistant"), pair, strict=True)]  # fmt: skip


def decode_rate(engine: LLMEngine, batch: int) -> float:
    """Tokens/s over all requests of a batch, after each request's first token."""
    rates = []
    for repeat in range(REPEATS + 1):  # the first round warms up
        for index in range(batch):
            ids = engine.dialogue_prompt_ids([], f"Story {repeat}.{index}: tell me a long one.")
            engine.add_request(index, ids, max_new_tokens=DECODE_TOKENS + 1)
        first: dict[int, float] = {}
        tokens = 0
        while engine.has_unfinished():
            outputs = engine.step()
            now = time.perf_counter()
            for output in outputs:
                tokens += output.request_id in first
                first.setdefault(output.request_id, now)
        _sync()
        if repeat:
            rates.append(tokens / (time.perf_counter() - min(first.values())))
    return statistics.median(rates)


def ttft_ms(engine: LLMEngine, incremental: bool) -> float:
    times = []
    for index, utterance in enumerate(UTTERANCES):
        ids = engine.dialogue_prompt_ids(_history(), utterance)
        head = engine.dialogue_prompt_ids(_history(), " ".join(utterance.split()[:-TAIL_WORDS]))
        head = head[: -len(engine.tokenizer.encode(REPLY_HEADER))]  # as llm/worker.py has it
        if incremental:
            engine.add_request(index, head, prompt_complete=False)
            while engine.has_pending_work():
                engine.step()
        _sync()
        started = time.perf_counter()
        if incremental:
            assert ids[: len(head)] == head, "the open prompt must be a prefix"
            engine.append_tokens(index, ids[len(head) :])
            engine.start_decode(index)
        else:
            engine.add_request(index, ids)
        while not engine.step():
            pass
        times.append((time.perf_counter() - started) * 1000)
        engine.abort(index)
    return statistics.median(times[1:])  # the first is a warm-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true", help="few tokens, one repeat")
    args = parser.parse_args()
    if args.dry_run:
        global DECODE_TOKENS, REPEATS
        DECODE_TOKENS, REPEATS = 4, 1
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    result: dict[str, object] = {"device": device, "torch": torch.__version__}
    for graphs in (False, True):
        started = time.perf_counter()
        engine = _engine(args.model, graphs)
        name = "graph" if graphs else "eager"
        result[f"load_s.{name}"] = round(time.perf_counter() - started, 2)
        result["layers"] = len(engine.runner.model.layers)
        for batch in (1, 4):
            result[f"decode_tok_s.{name}.batch{batch}"] = round(decode_rate(engine, batch), 1)
        result[f"ttft_ms.incremental.{name}"] = round(ttft_ms(engine, incremental=True), 2)
        cold = _engine(args.model, graphs, prefix_caching=False)
        result[f"ttft_ms.cold.{name}"] = round(ttft_ms(cold, incremental=False), 2)
        del engine, cold
    for batch in (1, 4):
        eager, graph = (result[f"decode_tok_s.{n}.batch{batch}"] for n in ("eager", "graph"))
        result[f"decode_graph_over_eager.batch{batch}"] = round(graph / eager, 2)  # type: ignore[operator]
    text = json.dumps(result, indent=1)
    print(text)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
