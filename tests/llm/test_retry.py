"""The runtime's one retry policy (``dial_runtime._retry``), on trio's virtual clock: what is retried, how long
each wait is (the backoff's range, or what the server asked, capped), when it stops, and that a cancellation
goes through. ``ChatAgent`` and ``Notifications`` use it (their own tests cover their use of it)."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from dial_runtime._retry import RetryPolicy, parse_retry_after


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}


class Busy(Exception):
    def __init__(self, wait: float | None = None) -> None:
        super().__init__("busy")
        self.wait = wait


async def run(policy: RetryPolicy, errors: list[BaseException]) -> tuple[list[float], list[tuple[int, str]]]:
    """Call under ``policy`` failing with ``errors`` in turn, then succeeding: when each try came, and each retry
    announced."""
    tried: list[float] = []
    announced: list[tuple[int, str]] = []
    tries = policy.tries(
        lambda error: isinstance(error, Busy),
        asked=lambda error: error.wait if isinstance(error, Busy) else None,
        on_retry=lambda made, error, wait: announced.append((made, wait)),
    )
    async for attempt in tries:
        with attempt:
            tried.append(anyio.current_time())
            if len(tried) <= len(errors):
                raise errors[len(tried) - 1]
    assert tries.made == len(tried)
    return tried, announced


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


@pytest.mark.anyio
async def test_waits_grow_exponentially_with_a_random_part_and_a_ceiling() -> None:
    policy = RetryPolicy(attempts=6, backoff=1.0, max_backoff=5.0)
    tried, announced = await run(policy, [Busy()] * 5)
    ranges = [(1.0, 2.0), (2.0, 3.0), (4.0, 5.0), (5.0, 5.0), (5.0, 5.0)]
    for gap, (least, most) in zip(gaps(tried), ranges, strict=True):
        assert least - 1e-6 <= gap <= most + 1e-6
    assert announced == [(1, "1.00-2.00s"), (2, "2.00-3.00s"), (3, "4.00-5.00s"), (4, "5.00s"), (5, "5.00s")]


@pytest.mark.anyio
async def test_a_wait_the_server_asks_for_is_kept_up_to_the_cap() -> None:
    tried, announced = await run(RetryPolicy(attempts=3, backoff=0.1, max_backoff=1.0), [Busy(7.0), Busy(0.0)])
    assert gaps(tried) == pytest.approx([7.0, 0.0])
    capped, _ = await run(RetryPolicy(attempts=2, backoff=0.1, max_backoff=1.0, max_asked=3.0), [Busy(7.0)])
    assert gaps(capped) == pytest.approx([3.0])
    assert announced[0] == (1, "7.00s")


@pytest.mark.anyio
async def test_the_last_error_is_raised_once_the_attempts_run_out() -> None:
    with pytest.raises(Busy):
        await run(RetryPolicy(attempts=3, backoff=0.0, max_backoff=0.0), [Busy()] * 3)


@pytest.mark.anyio
@pytest.mark.parametrize("error", [ValueError("final"), KeyboardInterrupt()])
async def test_an_error_not_to_retry_is_raised_at_once(error: BaseException) -> None:
    tried: list[float] = []
    with pytest.raises(type(error)):
        async for attempt in RetryPolicy(attempts=5, backoff=1.0, max_backoff=1.0).tries(
            lambda e: isinstance(e, Busy)
        ):
            with attempt:
                tried.append(anyio.current_time())
                raise error
    assert len(tried) == 1


@pytest.mark.anyio
async def test_the_callers_cancellation_cuts_a_wait_short() -> None:
    policy = RetryPolicy(attempts=10, backoff=100.0, max_backoff=100.0)
    with anyio.move_on_after(30) as scope:
        await run(policy, [Busy()] * 9)
    assert scope.cancelled_caught and anyio.current_time() == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"attempts": 0}, "attempts"), ({"backoff": -1.0}, "backoff"), ({"max_backoff": float("nan")}, "backoff")],
)
def test_a_policy_that_cannot_run_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**{"attempts": 2, "backoff": 1.0, "max_backoff": 2.0, **changes})


@given(seconds=st.integers(0, 10**6), milliseconds=st.integers(0, 10**6))
def test_retry_after_reads_seconds_and_milliseconds(seconds: int, milliseconds: int) -> None:
    assert parse_retry_after({"retry-after": str(seconds)}) == seconds
    assert parse_retry_after({"retry-after-ms": str(milliseconds), "retry-after": "9"}) == milliseconds / 1000
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
