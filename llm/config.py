"""Configuration of the LLM stage: one frozen dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
DECODE_DTYPES = ("auto", "gguf", "same", "float32", "bfloat16", "float16")
BACKENDS = ("native", "openai", "vllm")
# The most top log-probabilities a request may ask for (OpenAI's and vLLM's default cap).
MAX_TOP_LOGPROBS = 20
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Answer in one or two short spoken sentences."
)


@dataclass(frozen=True, slots=True)
class OpenAIBackendConfig:
    """The `openai` backend: any OpenAI-compatible server (`voxrelay llm-serve`, vLLM).

    The API key is read from the environment variable named here, never from config
    files. `warm_prefix`: send each stable partial prompt as a prefill-only request
    (max_tokens=1) so the server's prefix cache holds it when the turn ends.
    `probe_logprobs`: at each pause, ask the server for the top this-many log-probabilities
    of the token after the user's words, for the model's P(<|im_end|>), the end-of-turn
    signal (llm/async_backend.py); 0: do not (a server without `logprobs`).
    """

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "smollm2"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    warm_prefix: bool = True
    probe_logprobs: int = 20

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai.base_url must start with http:// or https://, got "
                             f"{self.base_url!r}")  # fmt: skip
        if not self.model:
            raise ValueError("openai.model must name the served model (GET /v1/models)")
        if self.timeout_s <= 0:
            raise ValueError(f"openai.timeout_s must be > 0, got {self.timeout_s}")
        _check_probe_logprobs("openai", self.probe_logprobs)


def _check_probe_logprobs(table: str, value: int) -> None:
    if not 0 <= value <= MAX_TOP_LOGPROBS:
        raise ValueError(f"{table}.probe_logprobs must lie in [0, {MAX_TOP_LOGPROBS}], got "
                         f"{value}")  # fmt: skip


@dataclass(frozen=True, slots=True)
class VLLMBackendConfig:
    """The `vllm` backend: vLLM's async engine inside the LLM process (CUDA).

    `model`: a Hugging Face id or local path; empty means the stage's `model_path` (a
    GGUF file, which vLLM loads with `tokenizer` naming the original HF tokenizer).
    Prefix caching and CUDA graphs are always on: they are why this backend exists.
    `probe_logprobs`: as the `openai` backend's (vLLM's `logprobs` sampling parameter).
    """

    model: str = ""
    tokenizer: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    gpu_memory_utilization: float = 0.5
    warm_prefix: bool = True
    probe_logprobs: int = 20

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"vllm.gpu_memory_utilization must lie in (0, 1], got "
                             f"{self.gpu_memory_utilization}")  # fmt: skip
        _check_probe_logprobs("vllm", self.probe_logprobs)


@dataclass(frozen=True, slots=True)
class LLMConfig:
    """Settings of the LLM engine; run-time facts (device, KV block count) live elsewhere.

    `temperature == 0` means greedy decoding. `kv_cache_tokens` sizes the paged KV pool
    shared by all requests (about 46 KB per token in float32 for SmolLM2-135M).
    """

    model_path: Path
    device: str = "auto"
    dtype: str = "auto"
    # Weights for decode steps and prompt tails ("same" = no second copy). "gguf": the
    # file's own quantized blocks through llm/csrc (CPU with AVX2; 3x fewer bytes than
    # bfloat16 and closer to float32); bfloat16 halves float32's bytes at a small drift.
    # "auto": gguf where it can run, else bfloat16 (docs/llm.md). Big prefills keep `dtype`.
    decode_dtype: str = "auto"
    # CPU float32 weights held prepacked for oneDNN (llm/weights.py): prompt passes ~1.7x
    # faster at 8-16 tokens, same results. False = plain GEMMs (the A/B in docs/llm.md).
    pack_weights: bool = True
    # CPU stage: decode on one thread once every reply in flight has this many tokens,
    # leaving a core to TTS (llm/core_yield.py). 1: from the first decode step on (with
    # the GGUF block kernels a step is faster on one thread than on two passive ones:
    # docs/llm.md, "Session 26"). 0 = off.
    yield_core_after_tokens: int = 1
    num_threads: int | None = None
    max_new_tokens: int = 60
    # The LLM stage ends a reply where sentence max_sentences + 1 would begin
    # (llm/sentences.py; the engine itself has no such limit); 0 = off.
    max_sentences: int = 2
    temperature: float = 0.0
    top_k: int = 0
    # No token that repeats an n-gram of the reply so far (llm/repeats.py); 0 = off.
    no_repeat_ngram: int = 6
    seed: int = 0
    max_context_tokens: int = 2048
    max_num_seqs: int = 8
    max_prefill_tokens: int = 512
    kv_block_size: int = 16
    kv_cache_tokens: int = 8192
    enable_prefix_caching: bool = True
    # Each session's next prompt is computed through the user's header before the turn
    # begins (llm/open_prompts.py): ~10 fewer tokens to prefill at the end of a turn
    # whose words were not stable before its pause. False = opened at the first words.
    open_prompt_ahead: bool = True
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    # Which engine serves the stage; the other two settings blocks are ignored.
    backend: str = "native"
    # Native engine: decode steps replayed from CUDA graphs per batch-size bucket.
    # None = on whenever the engine runs on CUDA; True on a CPU is an error.
    cuda_graphs: bool | None = None
    # Native engine: an end-of-turn head trained by `python -m bench.turn_head` (.npz;
    # llm/turn_head.py) instead of the model's own P(<|im_end|>) as the end-of-turn
    # probe. None = the model's own (the head did not win on natural speech, docs/llm.md).
    turn_head_path: Path | None = None
    openai: OpenAIBackendConfig = field(default_factory=OpenAIBackendConfig)
    vllm: VLLMBackendConfig = field(default_factory=VLLMBackendConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.model_path, Path):
            raise TypeError(f"model_path must be a pathlib.Path, got {type(self.model_path)}")
        if self.model_path.suffix != ".gguf":
            raise ValueError(f"model_path must point to a .gguf file, got {self.model_path}")
        if self.turn_head_path is not None and not isinstance(self.turn_head_path, Path):
            raise TypeError(
                f"turn_head_path must be a pathlib.Path, got {type(self.turn_head_path)}"
            )
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.decode_dtype not in DECODE_DTYPES:
            raise ValueError(
                f"decode_dtype must be one of {DECODE_DTYPES}, got {self.decode_dtype!r}"
            )
        if not 0 <= self.yield_core_after_tokens <= 10_000:
            raise ValueError(
                f"yield_core_after_tokens must be in 0..10000, got {self.yield_core_after_tokens}"
            )
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {self.num_threads}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = no top-k), got {self.top_k}")
        if self.max_sentences < 0:
            raise ValueError(f"max_sentences must be >= 0 (0 = no limit), got {self.max_sentences}")
        if self.no_repeat_ngram == 1 or not 0 <= self.no_repeat_ngram <= 64:
            raise ValueError(
                f"no_repeat_ngram must be 0 (off) or in 2..64, got {self.no_repeat_ngram}"
            )
        if self.kv_block_size < 1 or self.kv_block_size & (self.kv_block_size - 1):
            raise ValueError(f"kv_block_size must be a power of two, got {self.kv_block_size}")
        if self.max_context_tokens <= self.max_new_tokens:
            raise ValueError(
                f"max_context_tokens ({self.max_context_tokens}) must exceed "
                f"max_new_tokens ({self.max_new_tokens})"
            )
        if self.kv_cache_tokens < self.max_context_tokens:
            raise ValueError(
                f"kv_cache_tokens ({self.kv_cache_tokens}) must hold at least one full "
                f"context (max_context_tokens={self.max_context_tokens})"
            )
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if not isinstance(self.openai, OpenAIBackendConfig):
            raise TypeError(f"openai must be an OpenAIBackendConfig, got {type(self.openai)}")
        if not isinstance(self.vllm, VLLMBackendConfig):
            raise TypeError(f"vllm must be a VLLMBackendConfig, got {type(self.vllm)}")
        if self.cuda_graphs and self.device == "cpu":
            raise ValueError("cuda_graphs=True needs device 'cuda' or 'auto' (on a CUDA machine)")
        if self.max_prefill_tokens < self.kv_block_size:
            raise ValueError(
                f"max_prefill_tokens ({self.max_prefill_tokens}) must be >= "
                f"kv_block_size ({self.kv_block_size})"
            )
