from __future__ import annotations

import pytest

from voxrelay.llm.tokenizer import ChatTokenizer

TRICKY_TEXTS = [
    "Hello, world!",
    "  two leading spaces and trailing   ",
    "héllo wörld, naïve café",
    "emoji 🎉🇫🇷👩‍👩‍👧 mixed",
    "日本語のテキストと中文",
    "tabs\tand\nnew\n\nlines\r\n",
    "numbers 2024 and 3.14159 and $1,234",
    "don't won't I'll we're",
]


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_round_trip(tokenizer: ChatTokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    detokenizer = tokenizer.detokenizer()
    deltas = [detokenizer.push(token_id) for token_id in ids]
    assert "".join(deltas) + detokenizer.flush() == text
    # No delta may hold half a character: each one must re-encode to valid UTF-8 alone.
    assert all("\ufffd" not in delta for delta in deltas)


def test_known_ids(tokenizer: ChatTokenizer) -> None:
    # Ids from HF transformers' tokenizer for SmolLM2 on the same text.
    assert tokenizer.encode("What is the capital of France?") == [
        1780,
        314,
        260,
        3575,
        282,
        4649,
        47,
    ]


def test_digits_are_split_one_by_one(tokenizer: ChatTokenizer) -> None:
    # SmolLM2's pre-tokenizer ("smollm" in GGUF) isolates every digit.
    ids = tokenizer.encode("2024")
    assert len(ids) == 4
    assert [tokenizer.decode([token_id]) for token_id in ids] == ["2", "0", "2", "4"]


def test_special_tokens_are_single_ids(tokenizer: ChatTokenizer) -> None:
    for text, expected in (("<|endoftext|>", 0), ("<|im_start|>", 1), ("<|im_end|>", 2)):
        assert tokenizer.encode(text) == [expected]
        assert tokenizer.token_id(text) == expected
    assert tokenizer.encode("a<|im_end|>b") == [
        tokenizer.encode("a")[0],
        2,
        tokenizer.encode("b")[0],
    ]
    assert tokenizer.stop_ids == {0, 2}


def test_chat_template_is_chatml(tokenizer: ChatTokenizer) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "How are you?"},
    ]
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nHow are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True) == expected
    assert tokenizer.apply_chat_template(messages[:2], add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
    )


def test_template_default_system_prompt(tokenizer: ChatTokenizer) -> None:
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_dialogue_prompt_extends_previous_turn(tokenizer: ChatTokenizer) -> None:
    first = tokenizer.dialogue_prompt_ids("Be brief.", [], "Hi!")
    history = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]
    second = tokenizer.dialogue_prompt_ids("Be brief.", history, "And you?")
    # Everything but the generation prompt of turn one is a prefix of turn two.
    assert second[: len(first) - 3] == first[:-3]
    assert tokenizer.decode(second).endswith(
        "<|im_start|>user\nAnd you?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_detokenizer_holds_back_split_character(tokenizer: ChatTokenizer) -> None:
    # Feed the bytes of "é" (0xC3 0xA9) as two single-byte tokens.
    byte_token = {token: index for index, token in enumerate(tokenizer.token_bytes)}
    detokenizer = tokenizer.detokenizer()
    assert detokenizer.push(byte_token[b"\xc3"]) == ""
    assert detokenizer.push(byte_token[b"\xa9"]) == "é"
    assert detokenizer.push(tokenizer.token_id("<|im_end|>")) == ""


def test_message_without_content_is_rejected(tokenizer: ChatTokenizer) -> None:
    with pytest.raises(ValueError, match="role"):
        tokenizer.apply_chat_template([{"role": "user"}])
