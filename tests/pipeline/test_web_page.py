"""The browser page of `voxrelay serve` in a real headless Chromium.

Chromium's fake microphone plays a real speech clip (then silence) into the page's
AudioWorklet; the page streams it over the WebSocket, shows the live transcript, plays
the reply and draws the latency waterfall. The page's own counters
(`window.voxrelayStats`) say what it received and played.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import wave
from pathlib import Path

import jiwer
import pytest

from pipeline.audio_io import read_clip

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
EXPECTED = "he was not an ill disposed young man"

pytestmark = pytest.mark.slow


def _normalise(text: str) -> str:
    return " ".join(jiwer.RemovePunctuation()(text.lower().replace("-", " ")).split())


@pytest.fixture
def serve_url(clips_dir, tmp_path):
    """`voxrelay serve` as a real process on a free port of 127.0.0.1."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    lines = []
    url = None
    deadline = time.monotonic() + 180
    while url is None and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if match := re.search(r"serving (http://\S+/)", line):
            url = match.group(1)
    try:
        assert url, "voxrelay serve did not start:\n" + "".join(lines)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _fake_capture_wav(clips_dir: Path, path: Path) -> Path:
    """The clip plus 2 s of silence, as the 16-bit PCM WAV Chromium's fake device reads."""
    clip = read_clip(clips_dir / "librivox/0880.wav").with_silence(2.0)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(clip.channels)
        wav.setsampwidth(2)
        wav.setframerate(clip.sample_rate)
        wav.writeframes(clip.pcm16.astype("<i2").tobytes())
    return path


@pytest.fixture
def browser(clips_dir, tmp_path):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            f"needs {CHROMIUM} and {CHROMEDRIVER} "
            "(apt-get install chromium chromium-driver; `make system-deps` does it)"
        )
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    capture = _fake_capture_wav(clips_dir, tmp_path / "fake-mic.wav")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={capture}%noloop",
        "--autoplay-policy=no-user-gesture-required",
        "--window-size=1000,800",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "driver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def _stats(driver) -> dict:
    return driver.execute_script("return window.voxrelayStats;")


def _wait_for(driver, condition, timeout_s: float, what: str) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = _stats(driver)
        if condition(stats):
            return stats
        time.sleep(0.2)
    console = "\n".join(entry["message"] for entry in driver.get_log("browser"))
    stats = _stats(driver)
    status = driver.find_element("id", "status").text
    raise AssertionError(
        f"timed out waiting for {what}; status {status!r}; "
        f"stats {json.dumps(stats)[:3000]}\nbrowser console:\n{console}"
    )


def _types(stats: dict) -> list[str]:
    return [event["type"] for event in stats["events"]]


def test_page_streams_the_microphone_and_plays_the_reply(serve_url, browser, tmp_path):
    started = time.monotonic()
    browser.get(serve_url)
    assert browser.title == "voxrelay"
    browser.find_element("id", "start").click()

    _wait_for(browser, lambda s: "session.created" in _types(s), 30, "session.created")
    assert browser.find_element("id", "status").text.startswith("session ")
    stats = _wait_for(browser, lambda s: "transcript.partial" in _types(s), 60, "a live partial")
    partial = next(e for e in stats["events"] if e["type"] == "transcript.partial")
    stats = _wait_for(browser, lambda s: "trace" in _types(s), 90, "the turn's trace")
    events = {e["type"]: e for e in stats["events"]}
    assert "error" not in events, events["error"]
    final = events["transcript.final"]["text"]
    assert jiwer.wer(EXPECTED, _normalise(final)) <= 0.3, final
    assert events["response.done"]["status"] == "completed"
    trace = events["trace"]
    assert 0 < trace["ttfa_ms"] < 10_000

    # The reply arrived as audio and the page played all of it.
    rate = events["session.created"]["output_sample_rate"]
    received_ms = 1000 * stats["audioBytes"] / 2 / rate
    assert received_ms > 500 and abs(received_ms - trace["audio_out_ms"]) < 50
    stats = _wait_for(
        browser,
        lambda s: s["chunksPlayed"] == s["chunksReceived"],
        received_ms / 1000 + 10,
        "the reply to finish playing",
    )
    assert stats["chunksPlayed"] > 0
    assert stats["sentBytes"] > 2 * rate * 2  # the microphone streamed at least ~2 s

    # What the page shows: the live transcript, the reply text, the waterfall row.
    shown = browser.find_element("css selector", "#dialogue .user .text").text
    assert shown == final
    assert browser.find_element("css selector", "#dialogue .bot .text").text == trace["reply_text"]
    rows = browser.find_elements("css selector", "#waterfall .row")
    assert len(rows) == 1
    bars = rows[0].find_elements("css selector", ".bars div")
    assert {bar.get_attribute("class") for bar in bars} >= {"endpoint_ms", "llm_ttft_ms"}
    assert rows[0].find_element("css selector", ".ttfa").text == f"{trace['ttfa_ms']:.0f} ms"

    screenshot = tmp_path / "voxrelay-page.png"
    assert browser.save_screenshot(str(screenshot))
    print(
        f"\nscreenshot: {screenshot}  partial: {partial['text']!r}  final: {final!r}  "
        f"reply: {trace['reply_text']!r}  ttfa: {trace['ttfa_ms']:.0f} ms  "
        f"played {stats['chunksPlayed']} chunks ({received_ms:.0f} ms) "
        f"in {time.monotonic() - started:.1f} s"
    )
