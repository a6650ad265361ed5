"""The resource check the fuzz and soak tests rely on catches a leak and only a leak."""

import os

import pytest

from tests.soak import bounded_resources


def test_an_fd_opened_in_the_block_and_left_open_is_a_leak() -> None:
    with pytest.raises(AssertionError, match="leaked"), bounded_resources(None, settle_s=0.1):
        kept = os.open(os.devnull, os.O_RDONLY)
    os.close(kept)


def test_an_fd_closed_in_the_block_is_not() -> None:
    earlier = os.open(os.devnull, os.O_RDONLY)
    with bounded_resources(None, settle_s=0.1):
        os.close(earlier)  # an earlier test's socket, collected meanwhile
        os.close(os.open(os.devnull, os.O_RDONLY))  # opened and closed: fine
