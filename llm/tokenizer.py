"""Byte-level BPE tokenizer and ChatML template, built from GGUF metadata alone.

No tokenizer.json ships with the GGUF file, so the `tokenizers.Tokenizer` is assembled
from the vocabulary and merges. The pre-tokenizer must match llama.cpp's "smollm" pre
type: every digit is split off on its own, then the GPT-2 regex runs; this is what the
original SmolLM2 tokenizer.json does with `Digits(individual_digits=True)` + `ByteLevel`.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence
from functools import lru_cache

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from voxrelay.llm.gguf_loader import TokenizerData

# GGUF token types (llama.cpp `llama_token_type`).
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
# Pre-tokenizer types that split digits one by one before the GPT-2 regex.
_DIGIT_SPLIT_PRE = frozenset({"smollm", "starcoder", "refact", "codeshell"})
STOP_TOKEN_TEXTS = ("<|im_end|>", "<|endoftext|>")


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: the printable stand-in char -> raw byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {chr(b): b for b in printable}
    extra = 0
    for byte in range(256):
        if byte not in printable:
            mapping[chr(256 + extra)] = byte
            extra += 1
    return mapping


class ChatTokenizer:
    """Encode/decode text and render the model's chat template."""

    def __init__(self, data: TokenizerData) -> None:
        vocab = {token: index for index, token in enumerate(data.tokens)}
        merges = [tuple(merge.split(" ", 1)) for merge in data.merges]
        tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if data.pre in _DIGIT_SPLIT_PRE:
            tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Digits(individual_digits=True), byte_level]
            )
        else:
            tokenizer.pre_tokenizer = byte_level
        tokenizer.decoder = decoders.ByteLevel()
        special = {TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED}
        self.special_ids = frozenset(
            index for index, kind in enumerate(data.token_types) if kind in special
        )
        tokenizer.add_special_tokens(
            [
                AddedToken(data.tokens[i], special=True, normalized=False)
                for i in sorted(self.special_ids)
            ]
        )
        self._tokenizer = tokenizer
        self.vocab_size = len(data.tokens)
        self.bos_id = data.bos_id
        self.eos_id = data.eos_id
        self.bos_token = data.tokens[data.bos_id]
        self.eos_token = data.tokens[data.eos_id]
        self.stop_ids = frozenset(
            {data.eos_id} | {vocab[text] for text in STOP_TOKEN_TEXTS if text in vocab}
        )
        # Raw bytes of every token, for the incremental detokenizer; special tokens decode
        # to nothing so that control tokens never reach speech. translate + latin-1 maps
        # each stand-in char to its byte in C instead of a Python loop per character.
        to_latin1 = {ord(char): byte for char, byte in _unicode_to_byte().items()}
        self.token_bytes: list[bytes] = [
            b"" if index in self.special_ids else token.translate(to_latin1).encode("latin-1")
            for index, token in enumerate(data.tokens)
        ]
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = env.from_string(data.chat_template)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token strings in it map to their single ids."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int:
        index = self._tokenizer.token_to_id(token)
        if index is None:
            raise ValueError(f"token {token!r} is not in the vocabulary")
        return index

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The prompt string for `messages` ({"role", "content"} dicts) per the GGUF template."""
        for message in messages:
            if not {"role", "content"} <= set(message):
                raise ValueError(f"each message needs 'role' and 'content', got {dict(message)}")
        return self._template.render(
            messages=[dict(message) for message in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def dialogue_prompt_ids(
        self,
        system_prompt: str,
        history: Sequence[Mapping[str, str]],
        user_text: str,
    ) -> list[int]:
        """Prompt ids for system + history (alternating user/assistant) + a new user turn.

        Each ChatML message is delimited by special tokens, so the ids of a longer dialogue
        start with the ids of the shorter one: the prefix cache reuses earlier turns.
        """
        messages = [{"role": "system", "content": system_prompt}, *history]
        messages.append({"role": "user", "content": user_text})
        return self.encode(self.apply_chat_template(messages, add_generation_prompt=True))

    def detokenizer(self) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self.token_bytes)


class IncrementalDetokenizer:
    """Turns a stream of token ids into UTF-8 text deltas.

    A multibyte character can span tokens (emoji are often 2-4 byte tokens); the
    incremental UTF-8 decoder holds back an incomplete sequence until it completes, so a
    delta never contains a broken character. Truly invalid bytes become U+FFFD.
    """

    __slots__ = ("_decoder", "_token_bytes")

    def __init__(self, token_bytes: list[bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._decoder.decode(self._token_bytes[token_id])

    def flush(self) -> str:
        """Whatever is held back at the end of a stream (U+FFFD for a cut character)."""
        return self._decoder.decode(b"", final=True)
