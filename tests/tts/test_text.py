from __future__ import annotations

import pytest

from voxrelay.tts.text import clean_for_speech


@pytest.mark.parametrize(
    ("raw", "spoken"),
    [
        ("**Sure!** That is `easy`.", "Sure! That is easy."),
        ("See [the docs](https://example.com/docs) now.", "See the docs now."),
        ("Go to https://example.com/a?b=1 today.", "Go to a link today."),
        ("# Plan\n- buy milk\n- call mom", "Plan. buy milk. call mom"),
        ("1. First step\n2. Second step", "1, First step. 2, Second step"),
        ("Run this:\n```python\nprint(1)\n```\nDone.", "Run this: Done."),
        ("```bash", ""),
        ("Great job 🎉👍!", "Great job!"),
        ("Dr. Smith, e.g. the surgeon", "Doctor Smith, for example the surgeon"),
        ("i.e. this vs. that", "that is this versus that"),
        ("apples, pears, etc. Then more", "apples, pears, et cetera. Then more"),
        ("It rose 3.5% to 1,200 units", "It rose 3 point 5 percent to 1200 units"),
        ("pi is 3.14", "pi is 3 point 1 4"),
        ("It costs $3.50 or $1", "It costs 3 dollars 50 cents or 1 dollar"),
        ("salt & pepper", "salt and pepper"),
        ("  lots   of\t space  ", "lots of space"),
        ("😀", ""),
    ],
)
def test_clean_for_speech(raw: str, spoken: str) -> None:
    assert clean_for_speech(raw) == spoken
