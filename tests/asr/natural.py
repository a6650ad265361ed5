"""The natural-pause set: whole turns of real speech whose pauses are the speakers' own.

Turns (docs/asr.md, "The natural-pause set" says how they were chosen and labelled):
- JFK's "And so my fellow Americans, ask not ..." (the `naturalclips` asset): one turn,
  read with three pauses at its commas.
- A two-speaker telephone call (pyannote.audio's sample, `naturalclips`): its
  transcript's timed utterances, consecutive ones of one speaker joined into a turn;
  each turn cut from the call at its own bounds (never into the next speaker's words).
- A meeting recording's channel (pocketsphinx's `chan3`, 11 kHz, `testclips`): one
  speaker's two turns, split where the channel is silent for over SPLIT_S (another
  speaker has the floor).
- A read sentence with a pause at its comma (pocketsphinx's VAD test `leak-test`, 8 kHz).
- The other pocketsphinx clips (`testclips`): LibriVox sentences, spoken lists of cards
  and numbers, short commands; one turn each.
- Apart (`lecture_turns`, its own set in bench/turn_end.py): 60 s of one lecturer
  holding the floor, cut at pauses into pieces; every pause is mid-turn.
- Apart (`unscripted_turns`, its own set): three talks of ~25 s by one speaker, off the
  cuff, with "uh"s and "um"s (the Montreal Forced Aligner's test corpus), each one turn,
  cut at pauses into pieces as the lecture is; the talk's end is the true end.
- Apart (`phenomena_turns`, its own set): the same speaker's 49 short recordings of
  speech phenomena from that corpus (fillers, breaths, laughter, cut-off and repeated
  words, a word broken up by silences, creaky and falsetto voice), each one turn of a
  few words, with its own pauses, ending where he stops.

Labels come from the turn bounds, never from a fixed rule: every pause inside a turn
(a run of unvoiced Silero windows of at least MIN_PAUSE_MS between voiced ones) is a
mid-turn pause; the silence after the turn's last voiced window is its true end, except
for the LibriVox and "forever" clips: sentences cut out of a continuous reading, whose
reader goes on (`true_end` False: their pauses count, their ends do not).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import soxr

from tests.asr.clipdata import SAMPLE_RATE, read_clip, trim
from voxrelay.asr.audio_file import read_audio_file
from voxrelay.asr.vad import WINDOW_SAMPLES, StreamingVAD

MIN_PAUSE_MS = 200  # eot-bench's shortest pause
VOICED = 0.5  # Silero's threshold, with the endpointer's hysteresis below
UNVOICED = 0.35
POCKETSPHINX = (
    "goforward.raw",
    "something.raw",
    "numbers.raw",
    *(f"librivox/0{n}.wav" for n in (870, 880, 890, 920, 930)),
    *(f"cards/00{n}.wav" for n in range(1, 6)),
    "forever/input_2_16k.wav",
    "forever/input_4_16k.wav",
)
# Cut out of a continuous reading: the speaker goes on after the clip's end.
CONTINUED = ("librivox/", "forever/")
# The call's turns end where the other speaker starts, at most this far past the words.
CALL_TAIL_S = 0.15
CALL_HEAD_S = 0.0
# Silence this long inside a recording of one voice is another speaker's turn.
SPLIT_S = 2.5
# The lecture and the unscripted talks are cut at pauses into pieces no longer than
# this (the ASR cuts an utterance at max_utterance_s, 20 s, inside speech).
LECTURE_PIECE_S = 18.0
UNSCRIPTED = ("acoustic_corpus", "cold_corpus", "cold_corpus3")


@dataclass(frozen=True, slots=True)
class Turn:
    name: str
    audio: np.ndarray  # 16 kHz float32: the turn's speech, no silence appended
    pauses: tuple[tuple[int, int], ...]  # mid-turn pauses, (first, last + 1) sample
    speech_end: int  # the sample after the turn's last voiced window: the true end
    true_end: bool = True  # False: the recording was cut where the speaker went on
    # The conversation the turn is heard in, as one ASR session hears it ("": its own):
    # the pieces of one recording, one speaker's side of the call.
    session: str = ""


def has_true_end(name: str) -> bool:
    """Whether the clip `name` ends where its speaker stops (not one cut out of a
    continuous reading, whose reader goes on): its end counts as a turn's true end."""
    return not name.startswith(CONTINUED)


def natural_turns(natural_dir: Path, testclips_dir: Path, vad_model: object) -> list[Turn]:
    """Every turn of the set, labelled; `vad_model` is the shared Silero model."""
    named: list[tuple[str, np.ndarray]] = [("jfk", trim(read_clip(natural_dir / "jfk.wav")))]
    named += _call_turns(natural_dir)
    named += _split_turns("chan3", _resampled(testclips_dir / "regression/chan3.wav"), vad_model)
    named.append(("leak-test", trim(_resampled(testclips_dir / "vad/leak-test.wav"))))
    named += [(name, trim(read_clip(testclips_dir / name))) for name in POCKETSPHINX]
    return [
        replace(_label(name, audio, vad_model), session=_session(name)) for name, audio in named
    ]


def _session(name: str) -> str:
    """One speaker's side of the call ("call/04-diane": "call/diane"), the meeting
    channel's turns ("chan3/1": "chan3"); every other turn of the set is its own."""
    if name.startswith("call/"):
        return "call/" + name.rsplit("-", 1)[1]
    return "chan3" if name.startswith("chan3/") else name


def lecture_turns(natural_dir: Path, vad_model: object) -> list[Turn]:
    """60 s of one lecturer who holds the floor throughout (silero-vad's test recording,
    the `naturalclips` asset): every pause in it is mid-turn, none is an end."""
    audio = read_clip(natural_dir / "lecture.wav")
    return _pieces("lecture", audio, vad_model, ends=False)


def unscripted_turns(natural_dir: Path, vad_model: object) -> list[Turn]:
    """Three unscripted talks of ~25 s by one speaker, each one turn ("uh so this is the
    sick corpus uh i have a cold ... alright thanks"; the Montreal Forced Aligner's test
    corpus, the `naturalclips` asset): pauses at "uh"s, "um"s and between thoughts are
    mid-turn, and the talk's end, where he stops, is the true end."""
    return [
        turn
        for name in UNSCRIPTED
        for turn in _pieces(
            f"unscripted/{name}", read_clip(natural_dir / f"unscripted/{name}.wav"), vad_model
        )
    ]


def phenomena_turns(natural_dir: Path, vad_model: object) -> list[Turn]:
    """One turn per recording ("Montreal, uh, uh, forced aligner", "Ha ha ha, Montreal!
    Ha ha ha, forced!"), each its own session: pauses at fillers, breaths, laughter and
    cut-off words are mid-turn, and the recording's end, where he stops, is the true end."""
    return [
        _label(f"phenomena/{name}", trim(audio), vad_model)
        for name, audio in phenomena_recordings(natural_dir)
    ]


def phenomena_recordings(natural_dir: Path) -> list[tuple[str, np.ndarray]]:
    """The phenomena set's recordings whole, their own silence before and after the
    speech included, by name."""
    return [
        (path.stem, _resampled(path)) for path in sorted((natural_dir / "phenomena").glob("*.flac"))
    ]


def _pieces(name: str, audio: np.ndarray, vad_model: object, ends: bool = True) -> list[Turn]:
    """One speaker's recording as turns the ASR takes whole (it cuts an utterance at
    max_utterance_s inside speech): cut in the middle of as few of its pauses as keep
    every piece within LECTURE_PIECE_S (ties: the longer pauses are cut; the pauses cut at
    are left out). Only the last piece may have a true end (`ends`): the recording's."""
    pauses = _label(name, audio, vad_model).pauses
    limit = int(LECTURE_PIECE_S * SAMPLE_RATE)
    points = [0, *((a + b) // 2 for a, b in pauses), audio.size]
    lengths = [0, *(b - a for a, b in pauses), 0]
    # best[i]: (cuts, -pause samples cut) of the fewest cuts from the start to point i.
    best: list[tuple[int, int] | None] = [(0, 0)] + [None] * (len(points) - 1)
    before = [0] * len(points)
    for i in range(1, len(points)):
        for j in range(i):
            if best[j] is not None and points[i] - points[j] <= limit:
                cuts, cut = best[j]  # type: ignore[misc]
                score = (cuts + 1, cut - lengths[i])
                if best[i] is None or score < best[i]:  # type: ignore[operator]
                    best[i], before[i] = score, j
    assert best[-1] is not None, f"{name}: a stretch longer than {LECTURE_PIECE_S} s"
    chosen, i = [], len(points) - 1
    while i:
        chosen.append(points[i])
        i = before[i]
    cuts = [0, *reversed(chosen)]
    pieces = [audio[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    turns = [_label(f"{name}/{i}", piece, vad_model) for i, piece in enumerate(pieces)]
    last = len(turns) - 1
    return [
        Turn(t.name, t.audio, t.pauses, t.speech_end, true_end=ends and i == last, session=name)
        for i, t in enumerate(turns)
    ]


def _call_turns(natural_dir: Path) -> list[tuple[str, np.ndarray]]:
    """The call's turns: STM lines `file channel speaker start end words`."""
    call = read_clip(natural_dir / "call.wav")
    lines = [line.split(maxsplit=5) for line in (natural_dir / "call.stm").read_text().splitlines()]
    utterances = [(fields[2], float(fields[3]), float(fields[4])) for fields in lines if fields]
    turns: list[list[tuple[str, float, float]]] = []
    for utterance in utterances:
        if turns and turns[-1][-1][0] == utterance[0]:
            turns[-1].append(utterance)
        else:
            turns.append([utterance])
    out = []
    for index, turn in enumerate(turns):
        start, end = turn[0][1] - CALL_HEAD_S, turn[-1][2] + CALL_TAIL_S
        if index + 1 < len(turns):
            end = min(end, turns[index + 1][0][1])
        if index > 0:
            start = max(start, turns[index - 1][-1][2])
        segment = call[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)]
        out.append((f"call/{index:02d}-{turn[0][0].lower()}", segment))
    return out


def _resampled(path: Path) -> np.ndarray:
    """A mono recording (WAV at its own rate, FLAC), read as the file forms read one
    (asr/audio_file.py), at 16 kHz float32."""
    audio = read_audio_file(path)
    assert audio.channels == 1, path
    samples = audio.pcm16.astype(np.float32) / 32768
    return soxr.resample(samples, audio.sample_rate, SAMPLE_RATE).astype(np.float32)


def _split_turns(name: str, audio: np.ndarray, vad_model: object) -> list[tuple[str, np.ndarray]]:
    """The recording cut in the middle of every silence longer than SPLIT_S."""
    voiced = voiced_windows(audio, vad_model)
    gap = int(SPLIT_S * SAMPLE_RATE / WINDOW_SAMPLES)
    indices = np.flatnonzero(voiced)
    cuts = [0]
    for before, after in zip(indices, indices[1:], strict=False):
        if after - before > gap:
            cuts.append((before + after) // 2 * WINDOW_SAMPLES)
    cuts.append(audio.size)
    return [
        (f"{name}/{index}", trim(audio[start:end]))
        for index, (start, end) in enumerate(zip(cuts, cuts[1:], strict=False))
    ]


def voiced_windows(audio: np.ndarray, vad_model: object) -> list[bool]:
    """Silero's voiced/unvoiced call for every WINDOW_SAMPLES window of `audio`, with the
    endpointer's hysteresis."""
    vad = StreamingVAD(vad_model)  # type: ignore[arg-type]
    probs = vad.push(audio.astype(np.float32)) + vad.pad_and_finish()
    voiced: list[bool] = []
    state = False
    for prob in probs:
        state = prob >= VOICED if not state else prob >= UNVOICED
        voiced.append(state)
    return voiced


def unvoiced_run(voiced: list[bool], sample: int) -> tuple[int, int]:
    """The run of unvoiced windows that holds `sample`, as (first, last + 1) sample;
    (sample, sample) where that window is voiced."""
    window = min(sample // WINDOW_SAMPLES, len(voiced) - 1)
    if voiced[window]:
        return sample, sample
    first = last = window
    while first > 0 and not voiced[first - 1]:
        first -= 1
    while last + 1 < len(voiced) and not voiced[last + 1]:
        last += 1
    return first * WINDOW_SAMPLES, (last + 1) * WINDOW_SAMPLES


def quietest_near(audio: np.ndarray, at: int) -> int:
    """The middle of the quietest 20 ms of `audio` within 100 ms of sample `at` (10 ms
    steps): where a word boundary is cut open."""
    frame, search = SAMPLE_RATE // 50, SAMPLE_RATE // 10
    starts = range(max(at - search, 0), min(at + search, audio.size - frame), frame // 2)
    energy = [float(np.mean(audio[start : start + frame] ** 2)) for start in starts]
    return starts[int(np.argmin(energy))] + frame // 2


def _label(name: str, audio: np.ndarray, vad_model: object) -> Turn:
    voiced = voiced_windows(audio, vad_model)
    indices = np.flatnonzero(voiced)
    assert indices.size, f"{name}: no speech"
    first, last = int(indices[0]), int(indices[-1])
    min_windows = -(-MIN_PAUSE_MS * SAMPLE_RATE // 1000 // WINDOW_SAMPLES)
    pauses, run_start = [], None
    for window in range(first, last + 1):
        if not voiced[window] and run_start is None:
            run_start = window
        elif voiced[window] and run_start is not None:
            if window - run_start >= min_windows:
                pauses.append((run_start * WINDOW_SAMPLES, window * WINDOW_SAMPLES))
            run_start = None
    return Turn(name, audio, tuple(pauses), (last + 1) * WINDOW_SAMPLES, has_true_end(name))
