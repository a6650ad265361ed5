"""Llama forward pass in plain PyTorch over a paged KV cache.

Shapes: B sequences in a batch, T new tokens per sequence (padded), S context slots per
sequence (padded), D model dim, H query heads, Hkv kv heads, Dh head dim, V vocab.

RoPE layout: llama.cpp's converter permutes the Q/K rows of HF checkpoints so that
rotary pairs are adjacent (2i, 2i+1), the original Meta layout, and llama.cpp rotates
adjacent pairs. We keep the GGUF weights as they are and rotate adjacent pairs too,
which is the same function as HF's rotate-half on un-permuted weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from voxrelay.llm import kernels
from voxrelay.llm.gguf_loader import GGUFFile, LlamaHParams
from voxrelay.llm.kernels import BLOCK_KINDS
from voxrelay.llm.weights import BlockWeight, PackedWeight, Weight, can_pack, convert, linear


@dataclass(slots=True)
class LayerWeights:
    attn_norm: torch.Tensor  # (D,)
    wqkv: Weight  # ((H + 2 Hkv) Dh, D): q, k, v projections fused into one matmul
    wo: Weight  # (D, H Dh)
    ffn_norm: torch.Tensor  # (D,)
    w_gate_up: Weight  # (2 F, D): gate and up fused
    w_down: Weight  # (D, F)


# A forward of at most this many tokens (B * T) is a decode step: memory-bound, so it
# runs on the narrower weights. Against prepacked float32 weights bfloat16 wins only up
# to 3 tokens; against plain float32 GEMMs up to 8 (docs/llm.md, "Weight formats").
DECODE_MAX_TOKENS = 3
UNPACKED_DECODE_MAX_TOKENS = 8
# With the GGUF block kernels: they beat prepacked float32 up to here (docs/llm.md).
BLOCK_DECODE_MAX_TOKENS = 20
# Forwards of at most this many new tokens per sequence (T) attend in
# llm/csrc/attention.c on a CPU: it reads K/V from the paged cache in place instead of
# gathering the whole context per layer; SDPA wins beyond (docs/llm.md, "Attention kernel").
KERNEL_ATTENTION_MAX_NEW_TOKENS = 24
# Forwards of at most this many tokens (B * T) normalise in llm/csrc/norm.c (one call
# instead of ~7 torch ops a norm; single-threaded, so big prefills keep torch's).
KERNEL_NORM_MAX_TOKENS = 64


@dataclass(frozen=True, slots=True)
class WeightSet:
    max_tokens: int  # serves forwards of at most this many new tokens (B * T)
    layers: list[LayerWeights]
    lm_head: Weight  # (V, D)


class LlamaModel:
    """Weights plus a stateless forward; the KV cache is passed in by the runner.

    `decode_dtype`: an optional second, narrower copy of the matmul weights used for
    decode steps only. A decode step reads every weight once to compute a handful of
    tokens, so on a CPU it is bound by memory bandwidth: bfloat16 weights halve the bytes
    and more than double tokens/s here (docs/llm.md), while prefill, which is bound by
    compute and has no native bfloat16 on AVX2, keeps the exact float32 weights.
    `block_decode`: instead of a converted copy, small forwards read the file's own
    quantized blocks (`BlockWeight`, CPU): a third of bfloat16's bytes, and closer to the
    float32 result. `pack_weights`: hold the float32 weights prepacked for oneDNN where
    the build has it (llm/weights.py); the plain copies are then dropped.
    """

    def __init__(
        self,
        gguf_file: GGUFFile,
        hparams: LlamaHParams,
        dtype: torch.dtype,
        device: torch.device,
        decode_dtype: torch.dtype | None = None,
        pack_weights: bool = True,
        block_decode: bool = False,
    ) -> None:
        assert not (block_decode and decode_dtype is not None), "one decode weight set"
        self.hparams = hparams
        self.device = device
        self.dtype = dtype

        def load(name: str) -> torch.Tensor:
            return gguf_file.dequantize(name).to(device=device, dtype=dtype)

        self.embed = load("token_embd.weight")  # (V, D)
        # SmolLM2 ties the output projection to the embedding; other models ship one.
        has_output = "output.weight" in gguf_file.tensors
        self.lm_head: Weight = load("output.weight") if has_output else self.embed  # (V, D)
        self.norm = load("output_norm.weight")
        self.layers = []
        for index in range(hparams.num_layers):
            p = f"blk.{index}."
            layer = LayerWeights(
                attn_norm=load(p + "attn_norm.weight"),
                wqkv=torch.cat([load(p + f"attn_{name}.weight") for name in "qkv"]),
                wo=load(p + "attn_output.weight"),
                ffn_norm=load(p + "ffn_norm.weight"),
                w_gate_up=torch.cat([load(p + "ffn_gate.weight"), load(p + "ffn_up.weight")]),
                w_down=load(p + "ffn_down.weight"),
            )
            self.layers.append(layer)
        # Narrower copies of the matmul weights, each for forwards of at most its
        # `max_tokens` (B * T); bigger forwards use `layers`.
        self.narrow_sets: list[WeightSet] = []
        self.packed = pack_weights and can_pack(dtype, device)
        # The C kernels for small float32 CPU forwards (attention, norms): llm/kernels.py.
        self.cpu_kernels = device.type == "cpu" and dtype == torch.float32 and kernels.available()
        if block_decode:
            self.narrow_sets.append(_block_set(gguf_file, self.layers, has_output))
        if decode_dtype is not None and decode_dtype != dtype:
            limit = DECODE_MAX_TOKENS if self.packed else UNPACKED_DECODE_MAX_TOKENS
            self.narrow_sets.append(self._narrowed(decode_dtype, limit))
        if self.packed:
            self.layers = [_with_matmuls(layer, _pack) for layer in self.layers]
            self.lm_head = PackedWeight.pack(self.lm_head)  # the embedding stays plain
        half = hparams.head_dim // 2
        inv_freq = hparams.rope_base ** (-torch.arange(half, dtype=torch.float64) / half)
        angles = torch.outer(torch.arange(hparams.max_positions, dtype=torch.float64), inv_freq)
        # (max_positions, Dh/2), computed in float64 once so long positions stay exact.
        self.rope_cos = angles.cos().to(device=device, dtype=dtype)
        self.rope_sin = angles.sin().to(device=device, dtype=dtype)

    def _narrowed(self, dtype: torch.dtype, max_tokens: int) -> WeightSet:
        def narrow(weight: Weight) -> Weight:
            assert isinstance(weight, torch.Tensor)  # narrowed from the plain weights
            return convert(weight, dtype)

        layers = [_with_matmuls(layer, narrow) for layer in self.layers]
        return WeightSet(max_tokens, layers, narrow(self.lm_head))

    def weights_for(self, num_tokens: int) -> tuple[list[LayerWeights], Weight]:
        """(layers, lm_head) for a forward of `num_tokens` new tokens (B * T)."""
        for weights in self.narrow_sets:
            if num_tokens <= weights.max_tokens:
                return weights.layers, weights.lm_head
        return self.layers, self.lm_head

    def project(self, hidden: torch.Tensor, num_tokens: int) -> torch.Tensor:
        """Final hidden states (N, D) of a forward of `num_tokens` new tokens -> float32
        logits (N, V), through the lm_head of the same weight set (the same dtype)."""
        _, lm_head = self.weights_for(num_tokens)
        return linear(hidden, lm_head).float()

    def hidden(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        write_slots: torch.Tensor,
        context_slots: torch.Tensor,
        attn_mask: torch.Tensor,
        logit_rows: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        """Run B sequences of T new tokens; write their K/V; return the final (normed)
        hidden states of chosen rows, the lm_head's input (`project` makes them logits:
        the end-of-turn head reads some rows before it).

        input_ids, positions: (B, T) int64. write_slots: (B*T,) cache slot per new token.
        context_slots: (B, S) slots of positions 0..S-1 of each sequence (new ones included).
        attn_mask: (B, 1, T, S) bool, True where a query may attend.
        logit_rows: (N,) indices into the flattened (B*T) tokens whose logits are needed.
        k_cache, v_cache: (L, num_slots, Hkv, Dh). Returns (N, D) in the model's dtype.
        """
        hp = self.hparams
        batch, new_tokens = input_ids.shape
        num_q, num_kv, head_dim = hp.num_heads, hp.num_kv_heads, hp.head_dim
        cos = self.rope_cos[positions].unsqueeze(2)  # (B, T, 1, Dh/2)
        sin = self.rope_sin[positions].unsqueeze(2)
        x = self.embed[input_ids]  # (B, T, D)
        flat_slots = context_slots.flatten()  # (B * S,)
        context_shape = (batch, context_slots.shape[1], num_kv, head_dim)  # (B, S, Hkv, Dh)
        layers, _ = self.weights_for(batch * new_tokens)
        in_kernel = self.cpu_kernels and new_tokens <= KERNEL_ATTENTION_MAX_NEW_TOKENS
        if self.cpu_kernels and batch * new_tokens <= KERNEL_NORM_MAX_TOKENS:
            norm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = partial(
                kernels.rms_norm, eps=hp.rms_eps
            )
        else:
            norm = partial(_rms_norm, eps=hp.rms_eps)
        for index, layer in enumerate(layers):
            h = norm(x, layer.attn_norm)
            qkv = linear(h, layer.wqkv)  # (B, T, (H + 2 Hkv) Dh)
            qk = qkv[..., : (num_q + num_kv) * head_dim].unflatten(-1, (num_q + num_kv, head_dim))
            qk = _rotate_pairs(qk, cos, sin)  # (B, T, H + Hkv, Dh), q and k rotated together
            k = qk[:, :, num_q:].reshape(batch * new_tokens, num_kv, head_dim)
            v = qkv[..., (num_q + num_kv) * head_dim :].reshape(
                batch * new_tokens, num_kv, head_dim
            )
            k_cache[index].index_copy_(0, write_slots, k)
            v_cache[index].index_copy_(0, write_slots, v)
            if in_kernel:  # (B, T, H, Dh) -> (B, T, H Dh), K/V read in place
                attn = kernels.paged_attention(
                    qk[:, :, :num_q], k_cache[index], v_cache[index], context_slots, positions
                ).flatten(2)
            else:
                q = qk[:, :, :num_q].transpose(1, 2)  # (B, H, T, Dh)
                # One row gather per cache: ~3x cheaper than indexing with the (B, S) tensor.
                keys = k_cache[index].index_select(0, flat_slots).view(context_shape)
                values = v_cache[index].index_select(0, flat_slots).view(context_shape)
                attn = F.scaled_dot_product_attention(
                    q, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=attn_mask,
                    enable_gqa=True,
                )  # fmt: skip
                attn = attn.transpose(1, 2).flatten(2)  # (B, T, H Dh)
            x = x + linear(attn, layer.wo)  # (B, T, D)
            h = norm(x, layer.ffn_norm)
            gate, up = linear(h, layer.w_gate_up).chunk(2, dim=-1)  # (B, T, F) each
            x = x + linear(F.silu(gate) * up, layer.w_down)
        # Only the rows that get sampled pay for the norm and the (V x D) projection.
        x = x.flatten(0, 1).index_select(0, logit_rows)  # (N, D)
        return norm(x, self.norm)  # (N, D)


def blocks_cover(gguf_file: GGUFFile) -> bool:
    """Whether every matrix of the file is in a block kind the kernels read."""
    matrices = [info for info in gguf_file.tensors.values() if len(info.shape) == 2]
    return all(info.quant_type in BLOCK_KINDS for info in matrices)


def _block_set(
    gguf_file: GGUFFile, float_layers: list[LayerWeights], has_output: bool
) -> WeightSet:
    """The matmul weights as the file's quantized blocks, fused as the float32 ones are;
    the norms are the float32 layers' own."""
    layers = []
    for index, layer in enumerate(float_layers):
        p = f"blk.{index}."

        def blocks(*names: str, p: str = p) -> BlockWeight:
            return BlockWeight.from_file(gguf_file, [p + name + ".weight" for name in names])

        layers.append(
            LayerWeights(
                attn_norm=layer.attn_norm,
                wqkv=blocks("attn_q", "attn_k", "attn_v"),
                wo=blocks("attn_output"),
                ffn_norm=layer.ffn_norm,
                w_gate_up=blocks("ffn_gate", "ffn_up"),
                w_down=blocks("ffn_down"),
            )
        )
    head = "output.weight" if has_output else "token_embd.weight"
    return WeightSet(BLOCK_DECODE_MAX_TOKENS, layers, BlockWeight.from_file(gguf_file, [head]))


def _pack(weight: Weight) -> PackedWeight:
    assert isinstance(weight, torch.Tensor)
    return PackedWeight.pack(weight)


def _with_matmuls(layer: LayerWeights, convert_weight: Callable[[Weight], Weight]) -> LayerWeights:
    """The layer with `convert_weight` applied to its four matmul weights (norms shared)."""
    return LayerWeights(
        attn_norm=layer.attn_norm,
        wqkv=convert_weight(layer.wqkv),
        wo=convert_weight(layer.wo),
        ffn_norm=layer.ffn_norm,
        w_gate_up=convert_weight(layer.w_gate_up),
        w_down=convert_weight(layer.w_down),
    )


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs (x[2i], x[2i+1]) of the last dim by the position's angle i."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., Dh/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
