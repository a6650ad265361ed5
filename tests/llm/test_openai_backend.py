"""The `openai` backend against a real `voxrelay llm-serve` (real sockets, real model)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from voxrelay.llm.async_backend import ABSENT_SHARE, end_of_turn_probability
from voxrelay.llm.backend import NO_TOKEN_ID, REPLY_HEADER
from voxrelay.llm.config import LLMConfig, OpenAIBackendConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.native_backend import NativeBackend
from voxrelay.llm.openai_backend import OpenAIBackend
from voxrelay.llm.sequence import TokenOutput

HISTORY = [
    {"role": "user", "content": "I'm planning a weekend trip to the mountains."},
    {"role": "assistant", "content": "Bring warm layers, a rain jacket and good boots."},
]


def make_backend(
    model_path: Path, base_url: str, max_new_tokens: int = 10, **settings: object
) -> OpenAIBackend:
    openai = OpenAIBackendConfig(base_url=base_url, **settings)  # type: ignore[arg-type]
    return OpenAIBackend(LLMConfig(model_path, max_new_tokens=max_new_tokens, openai=openai))


@pytest.fixture
def backend(model_path: Path, llm_server: str) -> Iterator[OpenAIBackend]:
    client = make_backend(model_path, llm_server)
    yield client
    client.close()


def collect(backend: OpenAIBackend, request_id: int, limit_s: float = 30) -> list[TokenOutput]:
    outputs: list[TokenOutput] = []
    deadline = time.monotonic() + limit_s
    while backend.has_pending_work() and time.monotonic() < deadline:
        outputs += [out for out in backend.step() if out.request_id == request_id]
    assert outputs and outputs[-1].finished, "the reply did not finish"
    return outputs


def active_requests(base_url: str) -> int:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health") as response:
        return int(json.load(response)["active_requests"])


@pytest.mark.slow
def test_streams_the_native_engines_greedy_text(backend: OpenAIBackend, engine: LLMEngine) -> None:
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is the capital of France?"}]  # fmt: skip
    prompt = backend.render(messages)
    assert prompt == engine.tokenizer.apply_chat_template(messages)
    engine.add_request(1, engine.tokenizer.encode(prompt), max_new_tokens=10)
    expected = []
    while engine.has_unfinished():
        expected += [out.text for out in engine.step()]
    backend.submit(7, prompt)
    outputs = collect(backend, 7)
    assert len(outputs) > 1 and all(out.token_id == NO_TOKEN_ID for out in outputs)
    assert "".join(out.text for out in outputs) == "".join(expected)
    assert outputs[-1].finish_reason in ("stop", "length")


@pytest.mark.slow
def test_warming_fills_the_servers_prefix_cache(backend: OpenAIBackend, llm_server: str) -> None:
    # A turn nobody has sent before: without warming only the system prompt is cached.
    nonce = f"{time.monotonic_ns() % 100_000}"
    turn = f"Ticket {nonce}: which easy trails near the village suit a beginner on Sunday?"
    messages = [{"role": "system", "content": "You are a helpful guide."}, *HISTORY]
    final = backend.render([*messages, {"role": "user", "content": turn}])
    stable = final.removesuffix(REPLY_HEADER)[: -len(" on Sunday?")]
    backend.open(1, stable[:-20])
    backend.extend(1, stable)  # coalesced: waits for the first warm, then replaces it
    deadline = time.monotonic() + 20
    warmed = backend.count_tokens(stable)
    while backend.prefilled_tokens(1) != warmed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.prefilled_tokens(1) == warmed, "the warming request did not complete"
    backend.submit(1, final)
    outputs = collect(backend, 1)
    block = 16
    assert outputs[-1].num_cached_tokens == warmed // block * block  # every full warm block

    # Its first word differs, so it shares only system prompt + history with the warmed
    # turn ("Ticket <nonce>" in common could complete one more block, by chance of the
    # nonce's digit count).
    cold_turn = f"Winter question {nonce}: is the lake trail open, and is it icy?"
    backend.submit(2, backend.render([*messages, {"role": "user", "content": cold_turn}]))
    cold = collect(backend, 2)[-1].num_cached_tokens
    assert cold < warmed // block * block  # the history only, not the new words


@pytest.mark.slow
def test_abort_closes_the_stream_and_the_server_stops(
    backend: OpenAIBackend, llm_server: str
) -> None:
    long = make_backend(backend.config.model_path, llm_server, max_new_tokens=300)
    try:
        long.submit(3, long.render([{"role": "user", "content": "Tell me a long story."}]))
        received: list[TokenOutput] = []
        while len(received) < 2:
            received += long.step()
        assert long.abort(3) and not long.abort(3)
        assert not long.has_pending_work() and long.step() == []
        deadline = time.monotonic() + 5
        while active_requests(llm_server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert active_requests(llm_server) == 0
    finally:
        long.close()


@pytest.mark.slow
def test_the_servers_end_of_turn_probability_rides_on_the_first_token(
    backend: OpenAIBackend, engine: LLMEngine
) -> None:
    """The probe over HTTP (llm/async_backend.py): where <|im_end|> is among the top 20
    it is the native probe's P; where it is not, a small stand-in below the top 20."""
    native = NativeBackend(engine.config, engine)
    expected = {}
    for request_id, words in (
        (1, "What is the weather like today?"),
        (2, "I would like to book a"),
    ):
        prompt = backend.render([{"role": "user", "content": words}])
        native.submit(request_id, prompt)
        while request_id not in expected:
            for output in engine.step():
                expected.setdefault(output.request_id, output.probe_prob)
        engine.abort(request_id)
        backend.submit(request_id, prompt)
        outputs = collect(backend, request_id)
        assert all(output.probe_prob is None for output in outputs[1:])
        remote, local = outputs[0].probe_prob, expected[request_id]
        assert remote is not None and local is not None
        if request_id == 1:
            assert remote == pytest.approx(local, rel=1e-3)
        else:
            assert local < 1e-4 and remote < 1e-4, (local, remote)
    assert backend.probes_end_of_turn


@contextmanager
def _refusing_server(bodies: list[dict[str, object]]) -> Iterator[str]:
    """A real server on a socket that answers `logprobs` with a 400 and streams "Hi."
    otherwise; every request body goes to `bodies`. Yields its base URL."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bodies.append(body)
        if "logprobs" in body:
            return web.json_response({"error": {"message": "logprobs unsupported"}}, status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in ({"choices": [{"text": "Hi", "finish_reason": None}]},
                      {"choices": [{"text": ".", "finish_reason": "stop"}]}):  # fmt: skip
            await asyncio.sleep(0.02)
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_a_server_that_refuses_logprobs_turns_the_probe_off(model_path: Path) -> None:
    """A real socket to a server that answers `logprobs` with a 400: the reply still
    streams, its first token carries no probability, and no more probes are sent."""
    bodies: list[dict[str, object]] = []
    with _refusing_server(bodies) as url:
        client = make_backend(model_path, url, warm_prefix=False)
        try:
            prompt = client.render([{"role": "user", "content": "Hello there"}])
            client.submit(1, prompt)
            outputs = collect(client, 1)
            assert "".join(out.text for out in outputs) == "Hi." and outputs[0].probe_prob is None
            assert not client.probes_end_of_turn
            client.submit(2, prompt)
            collect(client, 2)
            # One probe, beside the first reply; none beside the second.
            assert len(bodies) == 3 and ["logprobs" in body for body in bodies[-1:]] == [False]
            assert sum("logprobs" in body for body in bodies) == 1, bodies
        finally:
            client.close()


def test_the_reply_whose_probe_was_refused_tells_the_asr_at_once(model_path: Path) -> None:
    """The refusal turns the backend's probing off while that very reply streams: the
    LLM stage still stamps its "no probability" (-1), or the ASR would wait out
    text_hint_wait_ms for a probability that is not coming."""
    from tests.llm.stage import FakeSender
    from voxrelay.ipc.records import Record, RecordKind, Stamp
    from voxrelay.llm.worker import LLMHandler

    class Stamps:
        def __init__(self) -> None:
            self.turn_end: list[tuple[int, int]] = []

        def stamp(self, session_id: int, turn_id: int, point: Stamp, value: int = 0,
                  **_: object) -> None:  # fmt: skip
            if point == Stamp.TURN_END_PROB:
                self.turn_end.append((turn_id, value))

        def commit(self, *args: object) -> None:
            pass

        def error(self, *args: object) -> None:
            raise AssertionError(f"stage error: {args}")

    bodies: list[dict[str, object]] = []
    with _refusing_server(bodies) as url:
        openai = {"base_url": url, "model": "smollm2", "warm_prefix": False}
        settings = {"model_path": str(model_path), "backend": "openai", "openai": openai}
        events = Stamps()
        handler = LLMHandler(settings, FakeSender(), events)  # type: ignore[arg-type]
        try:
            assert handler.backend.probes_end_of_turn
            handler.handle(Record(RecordKind.SPECULATIVE_END, 0, 1, 1, 0, 0, b"Hello there."))
            deadline = time.monotonic() + 30
            while not events.turn_end and time.monotonic() < deadline:
                handler.step()
                time.sleep(0.01)
            assert events.turn_end == [(1, -1)], events.turn_end
            assert not handler.backend.probes_end_of_turn
        finally:
            handler.backend.close()


def test_end_of_turn_probability_from_top_logprobs() -> None:
    assert end_of_turn_probability({"<|im_end|>": math.log(0.3), " I": math.log(0.5)}) == (
        pytest.approx(0.3)
    )
    # Absent: below the least listed (0.05) and the mass left (1 - 0.9): a share of it.
    top = {" I": math.log(0.6), " The": math.log(0.25), " It": math.log(0.05)}
    assert end_of_turn_probability(top) == pytest.approx(0.05 * ABSENT_SHARE)
    top = {" I": math.log(0.9), " The": math.log(0.097), " It": math.log(0.002)}
    assert end_of_turn_probability(top) == pytest.approx(0.001 * ABSENT_SHARE)
    assert end_of_turn_probability({}) is None


def test_unreachable_server_ends_the_reply_with_error(model_path: Path) -> None:
    backend = make_backend(model_path, "http://127.0.0.1:9/v1", timeout_s=2.0)
    try:
        backend.submit(1, backend.render([{"role": "user", "content": "Hello?"}]))
        outputs = collect(backend, 1)
        assert [(out.finished, out.finish_reason) for out in outputs] == [(True, "error")]
    finally:
        backend.close()


def test_request_body_is_a_plain_completion(model_path: Path) -> None:
    backend = make_backend(model_path, "http://127.0.0.1:9/v1", model="m")
    try:
        body = backend.request_body("<|im_start|>user\nhi", 1)
        assert body["model"] == "m" and body["max_tokens"] == 1 and body["stream"]
        assert body["stop"] == ["<|im_end|>", "<|endoftext|>"] and body["temperature"] == 0.0
        assert backend.url == "http://127.0.0.1:9/v1/completions"
    finally:
        backend.close()
