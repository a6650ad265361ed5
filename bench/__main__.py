"""`make bench`: every figure printed here also goes to bench/results.json (flat, named
numbers) and the README's numbers table is regenerated from that file."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from voxrelay.pipeline.openmp import prefer_passive_openmp

# Before the sections import torch and CTranslate2: each loads a libgomp that reads its
# waiting policy once, as it loads. Set after them, the figures measured in this process
# (LLM decode, ASR, TTS) ran with spinning OpenMP threads, unlike the stage processes
# they stand for (a decode step on two threads: ~57 against ~31 tok/s passive).
prefer_passive_openmp()

from bench import asr, barge_in, e2e, ipc, llm, readme, sip, tts, turn_end, ws  # noqa: E402

RESULTS = Path(__file__).with_name("results.json")


def main() -> None:
    started = time.perf_counter()
    results: dict[str, float] = {}
    for section in (ipc, asr, turn_end, llm, tts, e2e, barge_in, ws, sip):
        figures = section.run()
        print(section.table(figures), end="\n\n", flush=True)
        results.update(figures)
    results["bench.wall_s"] = round(time.perf_counter() - started, 1)
    RESULTS.write_text(json.dumps(dict(sorted(results.items())), indent=1) + "\n")
    print(
        f"wrote {RESULTS} ({len(results)} figures) on {platform.machine()}, "
        f"{platform.python_version()}"
    )
    readme.update(results)


if __name__ == "__main__":
    main()
