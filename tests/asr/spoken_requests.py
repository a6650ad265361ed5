"""What users say to a voice agent, spoken by the bundled Piper voice: the request set.

The natural-pause set (tests/asr/natural.py) is real speech, but it holds read
sentences, lists of cards and numbers, a quiet telephone call and almost no questions,
the commonest turn a voice agent hears. Its fit let "What time is it?" wait 2.2 s
(docs/asr.md, "Session 15"). These turns are synthetic (one voice, clean audio, no
hesitations): they measure the wait after a whole request, question or answer, never
stand in for real speech, and their pauses (Piper's own, at commas) are labelled as
the natural set's are. Piper's noise is off, so the set is the same audio on every run
(with the voice's default noise its figures moved by ~80 ms between two bench runs).
"""

from __future__ import annotations

import numpy as np
import soxr

from tests.asr.clipdata import SAMPLE_RATE, trim
from tests.asr.natural import Turn, _label

REQUESTS = (
    # Questions.
    "What time is it?",
    "Can you tell me the weather for tomorrow?",
    "How do I get to the train station?",
    "Is the pharmacy open on Sunday?",
    "Could you repeat that please?",
    "What's the balance on my account?",
    "When does the next bus leave?",
    "Do you have any tables free tonight?",
    "Why was my card declined?",
    "How much does the premium plan cost?",
    # Requests.
    "I'd like to book a table for two at seven.",
    "Please cancel my appointment on Friday.",
    "Set a timer for ten minutes.",
    "Send a message to my wife saying I'm running late.",
    "I need to change the delivery address for my order.",
    "Turn off the lights in the kitchen.",
    # Statements and answers.
    "My name is Sarah and I'm calling about my order.",
    "Thanks, that's all I needed.",
    "Yes, that's right.",
    "No, I don't think so.",
    "It's two four six eight.",
    "I've been waiting on hold for twenty minutes.",
    "The package never arrived.",
    "Well, I was thinking, maybe we could meet on Tuesday.",
)


def request_turns(vad_model: object) -> list[Turn]:
    """Every request spoken once by the `joe` voice, at 16 kHz, labelled."""
    from piper import PiperVoice

    from voxrelay.pipeline.models import asset_path

    voice = PiperVoice.load(str(asset_path("joe") / "voice.onnx"))
    return [
        _label(f"request/{index:02d}", trim(speak(text, voice)), vad_model)
        for index, text in enumerate(REQUESTS)
    ]


def speak(text: str, voice: object | None = None) -> np.ndarray:
    """`text` in the `joe` voice (loaded here unless given), 16 kHz float32, Piper's noise
    off: the same audio on every run."""
    from piper import PiperVoice, SynthesisConfig

    from voxrelay.pipeline.models import asset_path

    if voice is None:
        voice = PiperVoice.load(str(asset_path("joe") / "voice.onnx"))
    assert isinstance(voice, PiperVoice)
    noiseless = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    chunks = list(voice.synthesize(text, syn_config=noiseless))
    audio = np.concatenate([chunk.audio_float_array for chunk in chunks])
    return soxr.resample(audio, chunks[0].sample_rate, SAMPLE_RATE).astype(np.float32)
