"""`voxrelay llm-serve` over real sockets: request checks (fast, in process) and the real
server subprocess (slow): streaming, chat, batching across clients, disconnect = abort."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.engine_thread import EngineThread, StreamItem
from voxrelay.llm.openai_api import APIError, ServedModel, parse_request
from voxrelay.llm.sequence import TokenOutput
from voxrelay.llm.tokenizer import ChatTokenizer

SERVED = ServedModel("smollm2", temperature=0.0, top_k=0, max_new_tokens=60)
QUESTIONS = ("What is the capital of France?", "Name a large animal.", "What colour is grass?")


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ([1, 2], 400, "JSON object"),
        ({"prompt": ""}, 400, "prompt must be"),
        ({"prompt": "hi", "model": "gpt-4"}, 404, "not served"),
        ({"prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": "hi", "max_tokens": "8"}, 400, "max_tokens"),
        ({"prompt": "hi", "temperature": 0.7}, 400, "temperature=0.0"),
        ({"prompt": "hi", "n": 2}, 400, "n=2"),
        ({"prompt": "hi", "stop": ["\n"]}, 400, "stop strings"),
        ({"prompt": "hi", "stream": "yes"}, 400, "stream must be"),
        ({"prompt": "hi", "stream_options": {"include_usage": True}}, 400, "stream=true"),
        ({"prompt": "hi", "logprobs": 21}, 400, "logprobs must be an integer in"),
        ({"prompt": "hi", "logprobs": True}, 400, "logprobs must be an integer in"),
        ({"prompt": "hi", "top_logprobs": 3}, 400, "chat/completions"),
    ],
)
def test_bad_completion_requests(
    tokenizer: ChatTokenizer, body: Any, status: int, message: str
) -> None:
    with pytest.raises(APIError, match=message) as error:
        parse_request(body, False, tokenizer, SERVED)
    assert error.value.status == status
    assert error.value.body()["error"]["type"] == "invalid_request_error"


def test_chat_request_renders_the_template(tokenizer: ChatTokenizer) -> None:
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    parsed = parse_request({"messages": messages, "stop": "<|im_end|>"}, True, tokenizer, SERVED)
    assert parsed.prompt_ids == tokenizer.encode(tokenizer.apply_chat_template(messages))
    assert parsed.max_tokens == SERVED.max_new_tokens and not parsed.stream
    with pytest.raises(APIError, match="role"):
        parse_request({"messages": [{"role": "robot", "content": "x"}]}, True, tokenizer, SERVED)
    assert parsed.logprobs is None
    asked = {"messages": messages, "logprobs": True, "top_logprobs": 3}
    assert parse_request(asked, True, tokenizer, SERVED).logprobs == 3
    with pytest.raises(APIError, match="top_logprobs needs logprobs=true"):
        parse_request({"messages": messages, "top_logprobs": 3}, True, tokenizer, SERVED)
    assert parse_request({"prompt": "hi", "logprobs": 0}, False, tokenizer, SERVED).logprobs == 0


def greedy_text(engine: LLMEngine, prompt_ids: list[int], max_new_tokens: int) -> str:
    engine.add_request(500, prompt_ids, max_new_tokens=max_new_tokens)
    parts = []
    while engine.has_unfinished():
        parts += [output.text for output in engine.step()]
    return "".join(parts)


async def stream_completion(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """(text of each SSE chunk, the usage chunk) of one streaming /v1/completions call."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    pieces, usage = [], {}
    async with session.post(url + "/completions", json=body) as response:
        assert response.status == 200
        async for line in response.content:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            event = json.loads(line[5:])
            usage = event.get("usage") or usage
            pieces += [choice["text"] for choice in event["choices"]]
    return pieces, usage


@pytest.mark.slow
def test_streams_the_native_engines_greedy_text(llm_server: str, engine: LLMEngine) -> None:
    prompts = [engine.tokenizer.apply_chat_template([{"role": "user", "content": q}])
               for q in QUESTIONS]  # fmt: skip
    expected = [greedy_text(engine, engine.tokenizer.encode(p), 10) for p in prompts]

    async def run() -> tuple[list[tuple[list[str], dict[str, Any]]], dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            calls = [stream_completion(session, llm_server, {"prompt": p, "max_tokens": 10})
                     for p in prompts]  # fmt: skip
            results = await asyncio.gather(*calls)  # three clients at once
            async with session.get(llm_server.removesuffix("/v1") + "/health") as response:
                return results, await response.json()

    results, health = asyncio.run(run())
    for (pieces, usage), text in zip(results, expected, strict=True):
        assert "".join(pieces) == text and len(pieces) == usage["completion_tokens"]
    assert health["max_batch"] >= 2, "concurrent requests never shared a forward pass"
    assert health["active_requests"] == 0


@pytest.mark.slow
def test_chat_and_models_and_bad_json(llm_server: str, engine: LLMEngine) -> None:
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    expected = greedy_text(engine, engine.dialogue_prompt_ids([], QUESTIONS[0], ""), 6)

    async def run() -> tuple[Any, ...]:
        async with aiohttp.ClientSession() as session:
            async with session.get(llm_server + "/models") as response:
                models = await response.json()
            body = {"model": "smollm2", "max_tokens": 6,
                    "messages": [{"role": "system", "content": ""}, *messages]}  # fmt: skip
            async with session.post(llm_server + "/chat/completions", json=body) as response:
                reply = await response.json()
            async with session.post(llm_server + "/completions", data=b"{nope") as response:
                return models, reply, response.status, await response.json()

    models, reply, status, error = asyncio.run(run())
    assert [model["id"] for model in models["data"]] == ["smollm2"]
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"] == expected
    assert status == 400 and "not valid JSON" in error["error"]["message"]


@pytest.mark.slow
def test_logprobs_in_both_of_openais_shapes(llm_server: str, engine: LLMEngine) -> None:
    """/v1/completions' parallel lists and chat's `content` entries, streamed and not; the
    values are the engine's own (the remote end-of-turn probe reads them)."""
    tokenizer = engine.tokenizer
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTIONS[1]}])
    engine.add_request(501, tokenizer.encode(prompt), max_new_tokens=3, top_logprobs=5)
    local = []
    while engine.has_unfinished():
        local += engine.step()

    async def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        body = {"prompt": prompt, "max_tokens": 3, "logprobs": 5, "stream": True}
        chunks = []
        async with aiohttp.ClientSession() as session:
            async with session.post(llm_server + "/completions", json=body) as response:
                async for line in response.content:
                    if line.startswith(b"data: {"):
                        chunks += json.loads(line[5:])["choices"]
            chat = {"messages": [{"role": "user", "content": QUESTIONS[1]}], "max_tokens": 3,
                    "logprobs": True, "top_logprobs": 2}  # fmt: skip
            async with session.post(llm_server + "/chat/completions", json=chat) as response:
                return chunks, await response.json()

    chunks, chat = asyncio.run(run())
    assert len(chunks) == 3 == len(local)
    offset = 0
    for chunk, output in zip(chunks, local, strict=True):
        logprobs = chunk["logprobs"]
        assert logprobs["tokens"] == [tokenizer.decode([output.token_id])]
        assert logprobs["token_logprobs"][0] == pytest.approx(output.logprobs.logprob, abs=1e-4)
        expected = {tokenizer.decode([token]): value for token, value in output.logprobs.top}
        assert logprobs["top_logprobs"][0] == pytest.approx(expected, abs=1e-4)
        assert logprobs["text_offset"] == [offset]
        offset += len(chunk["text"])
    content = chat["choices"][0]["logprobs"]["content"]
    assert [entry["token"] for entry in content] == logprobs_tokens(tokenizer, local)
    assert all(len(entry["top_logprobs"]) == 2 for entry in content)
    assert content[0]["bytes"] == list(content[0]["token"].encode())


def logprobs_tokens(tokenizer: ChatTokenizer, outputs: list[TokenOutput]) -> list[str]:
    return [tokenizer.decode([output.token_id]) for output in outputs]


@pytest.mark.slow
def test_client_disconnect_aborts_the_request(llm_server: str) -> None:
    health_url = llm_server.removesuffix("/v1") + "/health"

    async def run() -> int:
        async with aiohttp.ClientSession() as session:
            body = {"prompt": "Once upon a time", "max_tokens": 400, "stream": True}
            async with session.post(llm_server + "/completions", json=body) as response:
                chunks = 0
                async for line in response.content:
                    chunks += line.startswith(b"data:")
                    if chunks == 2:
                        break  # leaving the block closes the connection mid-stream
            for _ in range(40):  # 400 tokens would take far longer than these 4 s
                async with session.get(health_url) as response:
                    active = int((await response.json())["active_requests"])
                if active == 0:
                    break
                await asyncio.sleep(0.1)
            return active

    assert asyncio.run(run()) == 0


class FlakyEngine:
    """Stands in for LLMEngine: one token per step; the first step fails."""

    def __init__(self) -> None:
        self.active: dict[int, int] = {}
        self.failed = False

    def add_request(
        self,
        request_id: int,
        prompt_ids: list[int],
        max_new_tokens: int,
        top_logprobs: int | None = None,
    ) -> None:
        self.active[request_id] = max_new_tokens

    def abort(self, request_id: int) -> bool:
        return self.active.pop(request_id, None) is not None

    def has_pending_work(self) -> bool:
        return bool(self.active)

    def step(self) -> list[TokenOutput]:
        if not self.failed:
            self.failed = True
            raise RuntimeError("CUDA error: out of memory")
        outputs = []
        for request_id in list(self.active):
            self.active[request_id] -= 1
            done = self.active[request_id] == 0
            outputs.append(TokenOutput(request_id, 5, "x", done, "length" if done else None))
            if done:
                del self.active[request_id]
        return outputs


def test_engine_thread_fails_requests_of_a_broken_step_and_keeps_serving() -> None:
    thread = EngineThread(FlakyEngine())  # type: ignore[arg-type]

    async def run() -> tuple[StreamItem, list[StreamItem]]:
        _, first = thread.submit([1, 2], 3)
        failure = await asyncio.wait_for(first.get(), 5)
        _, second = thread.submit([1, 2], 3)
        items = [await asyncio.wait_for(second.get(), 5) for _ in range(3)]
        return failure, items

    try:
        failure, items = asyncio.run(run())
    finally:
        thread.close()
    assert isinstance(failure, RuntimeError) and "out of memory" in str(failure)
    assert [isinstance(item, TokenOutput) and item.finished for item in items] == [
        False,
        False,
        True,
    ]
