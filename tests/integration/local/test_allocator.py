"""The local backend fixes glibc's mmap threshold, so freed tensors go back to the system, unless the user set it."""

from __future__ import annotations

import ctypes.util
import sys

import pytest

from adapters.local.allocator import release_large_blocks

glibc = sys.platform.startswith("linux") and ctypes.util.find_library("c") == "libc.so.6"


@pytest.mark.skipif(not glibc, reason="mallopt's mmap threshold is glibc's (this C library is another)")
def test_the_threshold_is_fixed_on_glibc() -> None:
    assert release_large_blocks() is True


def test_a_threshold_the_user_set_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert release_large_blocks() is False
