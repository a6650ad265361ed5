"""CoreYield: decode gives a core back to TTS only off the time-to-first-audio path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from voxrelay.llm.core_yield import CoreYield


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_yields_only_when_every_reply_is_past_its_first_fragment(two_threads: None) -> None:
    core_yield = CoreYield(after_tokens=4, full_threads=2)
    core_yield.before_step([0], prefilling=False)  # a reply's first token: TTFT path
    assert torch.get_num_threads() == 2
    core_yield.before_step([3], prefilling=False)  # its first fragment is not out yet
    assert torch.get_num_threads() == 2
    core_yield.before_step([4], prefilling=False)
    assert torch.get_num_threads() == 1 and core_yield.yielding
    core_yield.before_step([9, 2], prefilling=False)  # another session's reply starts
    assert torch.get_num_threads() == 2
    core_yield.before_step([9, 7], prefilling=True)  # someone speaks: partials prefill
    assert torch.get_num_threads() == 2
    core_yield.before_step([], prefilling=False)  # idle: back to full for what comes
    assert torch.get_num_threads() == 2 and not core_yield.yielding


@pytest.mark.parametrize(("after_tokens", "full_threads"), [(0, 2), (6, 1)])
def test_off_or_single_threaded_never_touches_threads(
    two_threads: None, after_tokens: int, full_threads: int
) -> None:
    core_yield = CoreYield(after_tokens, full_threads)
    core_yield.before_step([50], prefilling=False)
    assert torch.get_num_threads() == 2 and not core_yield.yielding
