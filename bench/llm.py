"""LLM: decode speed of the native engine vs HF transformers on the same GGUF, and TTFT
of a prompt prefilled while the user speaks vs a cold prefill of the whole prompt.

Decode: greedy, same prompt, DECODE_TOKENS new tokens, 2 threads for every engine; the
rate counts only the tokens after the first (the first comes out of the prefill pass).
Runs are interleaved across engines so that load from other work on the machine hits
them alike; medians are reported. "native_1thread" is the default engine again on one
thread, as the stage decodes (`yield_core_after_tokens`, llm/core_yield.py).

TTFT: ~300 tokens of dialogue history, then a 20-word user turn. Incremental: an open
request already holds history + all but the last few words (as llm/worker.py builds it
from stable partials) and has no pending work; the clock starts at `append_tokens(rest)`
+ `start_decode`. Cold: an engine with prefix caching off prefills the whole prompt.
Each repeat uses a different utterance so no tail block is served from the cache.
"""

from __future__ import annotations

import statistics
import time

import torch

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.pipeline.models import asset_path
from voxrelay.pipeline.naive import load_hf_model

THREADS = 2
DECODE_TOKENS = 48
DECODE_REPEATS = 3
PROMPT = "Explain how a bicycle works, step by step, in detail."
# Words of the user's turn still unheard when the final transcript arrives.
TAIL_WORDS = 3
HISTORY = (
    (
        "Hi, I'm planning a weekend trip to the mountains and I'm not sure what to pack.",
        "Bring warm layers, a waterproof jacket, sturdy boots, a map, snacks and plenty "
        "of water. Mountain weather changes fast, so plan for rain and cold evenings.",
    ),
    (
        "Good point. Should I rent a cabin or bring a tent for the two nights?",
        "A cabin is more comfortable and safer if storms are forecast. A tent is cheaper "
        "and closer to nature, but you need a good sleeping bag for cold nights.",
    ),
    (
        "The forecast says light rain on Saturday and clear skies on Sunday morning.",
        "Then hike on Sunday morning for the views, and keep Saturday for a short walk "
        "near the cabin or a visit to the village. Pack a rain cover for your backpack.",
    ),
    (
        "Are there any easy trails that are suitable for a beginner like me?",
        "Look for loop trails under ten kilometres with little climbing. Visitor centres "
        "mark them as easy, and they usually have signs, benches and a place to turn back.",
    ),
    (
        "Thanks. What should I eat before a long hike to keep my energy up?",
        "Have a breakfast with slow carbohydrates and some protein, like oats with nuts "
        "or eggs on toast, then snack on fruit, trail mix or a sandwich every hour or so.",
    ),
)
# 20-word user turns, one per TTFT repeat.
UTTERANCES = (
    "Could you tell me how early I should leave home on Sunday to reach the trail "
    "before the crowds arrive?",
    "What's the best way to keep my phone charged during the hike if there is no "
    "electricity at the cabin?",
    "If I see a wild animal on the path what should I do to stay safe and not scare it?",
    "How much water should one person really carry for a five hour walk on a warm and "
    "sunny mountain day?",
    "Which small first aid items are worth packing for blisters, scratches and a twisted "
    "ankle on an easy beginner trail?",
)


def _engine(decode_dtype: str = "auto", prefix_caching: bool = True) -> LLMEngine:
    config = LLMConfig(
        asset_path("smollm2") / "model.gguf",
        device="cpu",
        num_threads=THREADS,
        decode_dtype=decode_dtype,
        enable_prefix_caching=prefix_caching,
    )
    return LLMEngine(config)


def _native_decode(
    engine: LLMEngine, ids: list[int], request_id: int, tokens: int = DECODE_TOKENS
) -> tuple[float, int]:
    """(decode tok/s after the first token, tokens generated) for one greedy request."""
    engine.add_request(request_id, ids, max_new_tokens=tokens)
    stamps: list[float] = []
    while engine.has_unfinished():
        stamps += [time.perf_counter() for _ in engine.step()]
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps)


def _hf_decode(model: torch.nn.Module, ids: list[int], tokens: int) -> float:
    """Decode tok/s of HF transformers, greedy with its KV cache, after the first token."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
        cache, token = out.cache, out.logits[0, -1].argmax()
        started = time.perf_counter()
        for _ in range(tokens - 1):
            out = model(input_ids=token.view(1, 1), cache=cache, use_cache=True)
            cache, token = out.cache, out.logits[0, -1].argmax()
        return (tokens - 1) / (time.perf_counter() - started)


def _llamacpp_decode(ids: list[int], tokens: int) -> float | None:
    """Decode tok/s of llama.cpp on the same GGUF, if llama-cpp-python is installed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llama = Llama(
        str(asset_path("smollm2") / "model.gguf"), n_threads=THREADS, n_ctx=2048, verbose=False
    )
    stamps: list[float] = []
    for _ in llama.generate(ids, top_k=1, temp=0.0):
        stamps.append(time.perf_counter())
        if len(stamps) == tokens:
            break
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def _first_token_ms(engine: LLMEngine, started: float) -> float:
    while not engine.step():
        pass
    return (time.perf_counter() - started) * 1000


def _ttft(native: LLMEngine, cold: LLMEngine, request_id: int) -> tuple[dict[str, float], int]:
    """(median TTFT ms per mode, prompt tokens of the last turn)."""
    history = [
        {"role": role, "content": text}
        for exchange in HISTORY
        for role, text in zip(("user", "assistant"), exchange, strict=True)
    ]
    header = native.tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n")
    times: dict[str, list[float]] = {"incremental": [], "cold": []}
    for utterance in UTTERANCES:
        request_id += 1
        ids = native.dialogue_prompt_ids(history, utterance)
        heard = " ".join(utterance.split()[:-TAIL_WORDS])
        partial = native.dialogue_prompt_ids(history, heard)[: -len(header)]
        assert ids[: len(partial)] == partial, "partial prompt is not a prefix of the final"
        native.add_request(request_id, partial, max_new_tokens=1, prompt_complete=False)
        while native.has_pending_work():
            native.step()
        started = time.perf_counter()
        native.append_tokens(request_id, ids[len(partial) :])
        native.start_decode(request_id)
        times["incremental"].append(_first_token_ms(native, started))
        cold.add_request(request_id, ids, max_new_tokens=1)
        times["cold"].append(_first_token_ms(cold, time.perf_counter()))
    return {mode: statistics.median(values) for mode, values in times.items()}, len(ids)


def run() -> dict[str, float]:
    torch.set_num_threads(THREADS)
    native = _engine()  # the default: GGUF blocks where the kernels run (docs/llm.md)
    native_bf16 = _engine(decode_dtype="bfloat16")  # the default before the block kernels
    # Also the cold-TTFT engine: a prefill never touches the decode weights, and with
    # prefix caching off every prompt is computed in full.
    native_fp32 = _engine(decode_dtype="same", prefix_caching=False)
    hf = load_hf_model()
    ids = native.dialogue_prompt_ids([], PROMPT)
    for engine in (native, native_bf16, native_fp32):  # first-call allocations not measured
        _native_decode(engine, ids, 0, tokens=8)
    _hf_decode(hf, ids, 4)
    rates: dict[str, list[float]] = {
        "native": [],
        "native_1thread": [],
        "native_bf16": [],
        "native_fp32": [],
        "hf": [],
    }
    for repeat in range(DECODE_REPEATS):
        rate, generated = _native_decode(native, ids, 100 + repeat)
        rates["native"].append(rate)
        torch.set_num_threads(1)
        rates["native_1thread"].append(_native_decode(native, ids, 200 + repeat)[0])
        torch.set_num_threads(THREADS)
        rates["native_bf16"].append(_native_decode(native_bf16, ids, 100 + repeat)[0])
        rates["native_fp32"].append(_native_decode(native_fp32, ids, 100 + repeat)[0])
        rates["hf"].append(_hf_decode(hf, ids, generated))
    del hf
    ttft, prompt_tokens = _ttft(native, native_fp32, 1000)
    ttft_bf16, _ = _ttft(native_bf16, native_fp32, 2000)
    results = {
        f"llm.decode_tok_s.{name}": round(statistics.median(values), 1)
        for name, values in rates.items()
    }
    results["llm.decode_gguf_blocks"] = float(native.state.decode_weights == "gguf")
    llamacpp = _llamacpp_decode(ids, DECODE_TOKENS)
    if llamacpp is not None:
        results["llm.decode_tok_s.llamacpp"] = round(llamacpp, 1)
    results["llm.decode_speedup_vs_hf"] = round(
        results["llm.decode_tok_s.native"] / results["llm.decode_tok_s.hf"], 2
    )
    results["llm.decode_native_over_bf16"] = round(
        results["llm.decode_tok_s.native"] / results["llm.decode_tok_s.native_bf16"], 2
    )
    results["llm.decode_1thread_over_2threads"] = round(
        results["llm.decode_tok_s.native_1thread"] / results["llm.decode_tok_s.native"], 2
    )
    results["llm.decode_bf16_over_fp32"] = round(
        results["llm.decode_tok_s.native_bf16"] / results["llm.decode_tok_s.native_fp32"], 2
    )
    results["llm.ttft_prompt_tokens"] = float(prompt_tokens)
    for mode, ms in ttft.items():
        results[f"llm.ttft_ms.{mode}"] = round(ms, 1)
    results["llm.ttft_incremental_over_cold"] = round(
        results["llm.ttft_ms.incremental"] / results["llm.ttft_ms.cold"], 3
    )
    # The bfloat16 engine's tail runs on packed float32 (over 3 tokens): its own ratio,
    # against the cold prefills of the same run.
    results["llm.ttft_ms.incremental_bf16"] = round(ttft_bf16["incremental"], 1)
    results["llm.ttft_bf16_incremental_over_cold"] = round(
        ttft_bf16["incremental"] / statistics.median((ttft["cold"], ttft_bf16["cold"])), 3
    )
    return results


def table(results: dict[str, float]) -> str:
    lines = [
        f"LLM decode, greedy, {DECODE_TOKENS} new tokens, {THREADS} threads (tok/s, median)",
        f"{'engine':28} {'tok/s':>7} {'/ HF':>6}",
    ]
    hf_rate = results["llm.decode_tok_s.hf"]
    default = "GGUF blocks" if results.get("llm.decode_gguf_blocks") else "bf16"
    labels = {
        "native": f"native, default ({default})",
        "native_1thread": "native, default, 1 thread",
        "native_bf16": "native, bf16 decode",
        "native_fp32": "native, fp32 decode",
        "hf": "HF transformers, fp32",
        "llamacpp": "llama.cpp",
    }
    for name, label in labels.items():
        rate = results.get(f"llm.decode_tok_s.{name}")
        if rate is not None:
            lines.append(f"{label:28} {rate:>7.1f} {rate / hf_rate:>5.2f}x")
    lines.append(
        f"TTFT, {results['llm.ttft_prompt_tokens']:.0f}-token dialogue prompt (ms, median): "
        f"incremental {results['llm.ttft_ms.incremental']:.1f}, "
        f"cold {results['llm.ttft_ms.cold']:.1f}, "
        f"incremental / cold = {results['llm.ttft_incremental_over_cold']:.3f} (goal <= 0.10)"
    )
    if "llm.ttft_ms.incremental_bf16" in results:
        lines.append(
            f"  with bf16 decode weights: incremental {results['llm.ttft_ms.incremental_bf16']:.1f}"
            f", / cold = {results['llm.ttft_bf16_incremental_over_cold']:.3f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
