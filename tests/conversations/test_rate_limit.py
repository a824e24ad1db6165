"""The per-user rate limit: a sliding window in the shared cache (conversations.live)."""

from __future__ import annotations

import pytest


@pytest.mark.django_db
def test_the_rate_limit_slides_and_costs_the_same_whatever_the_allowance() -> None:
    from django.core.cache import cache

    from conversations.live import RATE_WINDOW_S, rate_limited

    cache.clear()
    start = 1_000 * RATE_WINDOW_S  # the start of a window
    assert [rate_limited(7, per_minute=3, now=start + i) for i in range(5)] == [
        False,
        False,
        False,
        True,
        True,
    ]
    # Refused messages used nothing up; another user has an allowance of their own.
    assert not rate_limited(8, per_minute=3, now=start + 5)
    # Half a window later the previous three still count for half: 1.5 + 1 <= 3, then over.
    later = start + RATE_WINDOW_S * 1.5
    assert [rate_limited(7, per_minute=3, now=later + i / 100) for i in range(3)] == [
        False,
        True,
        True,
    ]
    # Two windows later, nothing of the old ones counts.
    assert not rate_limited(7, per_minute=3, now=start + 3 * RATE_WINDOW_S)
    # A huge allowance costs the same few cache calls (it used to read every slot).
    assert not rate_limited(9, per_minute=100_000, now=start)
    cache.clear()


@pytest.mark.django_db
def test_each_kind_of_frame_is_counted_apart() -> None:
    """The frame allowance (every frame but ping) does not use up the message allowance."""
    from django.core.cache import cache

    from conversations.live import RATE_WINDOW_S, rate_limited

    cache.clear()
    start = 1_000 * RATE_WINDOW_S
    frames = [rate_limited(7, per_minute=2, kind="frame", now=start + i) for i in range(3)]
    assert frames == [False, False, True]
    assert not rate_limited(7, per_minute=2, kind="message", now=start + 3)
    assert not rate_limited(7, per_minute=2, now=start + 3)  # "message" is the default
    assert rate_limited(7, per_minute=2, now=start + 3)
    cache.clear()
