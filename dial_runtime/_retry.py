"""The one retry policy of everything the runtime calls over a network that may fail for a moment: model servers
(:class:`~dial_runtime.llm.ChatAgent`) and notifiers (:class:`~dial_runtime.decisions.notify.Notifications`).

The loop is stamina's (``stamina.retry_context``): it sleeps on trio or asyncio alike (so a caller's deadline or
cancel scope cuts a wait short), reports each retry to the instrumentation an application configured for stamina
(by default one WARNING record on the ``stamina`` logger; structlog or Prometheus when installed; the error it
names is the one-line, secret-free form its caller made of the failure), and ``stamina.set_testing(True)`` makes
every wait instant in an application's own tests. This module says what is retried and how long to wait:
``attempts`` tries in all; before retry *n*, ``min(max_backoff, backoff * 2 ** (n - 1))`` seconds plus a random
part of up to ``backoff`` seconds (so callers failing together do not retry together), never more than
``max_backoff``, or what the server asked (``Retry-After``, ``retry-after-ms``), capped at ``max_asked`` when that
is set.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timezone

import msgspec
import stamina

__all__ = ["RetryPolicy", "Tries", "parse_retry_after"]

_SECONDS = re.compile(r"\d+(\.\d+)?")


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The seconds a server asks the client to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` holds seconds (fractions are accepted) or an HTTP date, read against ``now`` (epoch seconds,
    default the current time); a date in the past means no wait. ``None`` when neither header is there or
    readable. ``headers`` is looked up by lower-case name, as ``httpx.Headers`` does case-insensitively.
    """
    milliseconds = headers.get("retry-after-ms", "").strip()
    if _SECONDS.fullmatch(milliseconds):
        return float(milliseconds) / 1000.0
    value = headers.get("retry-after", "").strip()
    if _SECONDS.fullmatch(value):
        return float(value)
    if not value:
        return None
    try:
        date = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if date.tzinfo is None:  # "-0000" dates come back naive; HTTP dates are always GMT
        date = date.replace(tzinfo=timezone.utc)
    return max(0.0, date.timestamp() - (time.time() if now is None else now))


def _nothing_asked(error: BaseException) -> float | None:
    return None


#: Called before each retry: the number of the try that failed (1, 2, ...), its error, and the wait before the
#: next in words (``7.00s``, ``1.00-2.00s``).
OnRetry = Callable[[int, BaseException, str], None]


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a call that may fail for a moment is tried again (see the module docstring)."""

    attempts: int
    backoff: float
    max_backoff: float
    max_asked: float | None = None

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ValueError(f"attempts must be 1 or more, got {self.attempts!r}")
        if not (self.backoff >= 0 and self.max_backoff >= 0):
            raise ValueError(f"backoff and max_backoff must be 0 or more, got {self.backoff}, {self.max_backoff}")

    def wait_words(self, retry: int, asked: float | None = None) -> str:
        """The wait before retry ``retry`` (1, 2, ...) in words: what the server asked, else the range the
        backoff and its random part fall in."""
        if asked is not None:
            return f"{asked:.2f}s"
        exponential = self.backoff * 2.0 ** min(retry - 1, 64)
        least, most = min(self.max_backoff, exponential), min(self.max_backoff, exponential + self.backoff)
        return f"{least:.2f}s" if most == least else f"{least:.2f}-{most:.2f}s"

    def tries(
        self,
        retry_on: Callable[[BaseException], bool],
        *,
        asked: Callable[[BaseException], float | None] = _nothing_asked,
        on_retry: OnRetry | None = None,
    ) -> Tries:
        """The tries of one call: ``async for attempt in policy.tries(...): with attempt: ...``. An error
        ``retry_on`` accepts is tried again until the attempts run out, then raised; any other error (a
        cancellation too) is raised at once."""
        return Tries(self, retry_on, asked, on_retry)


class Tries:
    """The attempts of one call under a :class:`RetryPolicy`; ``made`` counts the tries begun so far."""

    def __init__(
        self,
        policy: RetryPolicy,
        retry_on: Callable[[BaseException], bool],
        asked: Callable[[BaseException], float | None],
        on_retry: OnRetry | None,
    ) -> None:
        self.policy = policy
        self.made = 0
        self._retry_on = retry_on
        self._asked = asked
        self._on_retry = on_retry
        self._attempts: AsyncIterator[stamina.Attempt] = stamina.retry_context(
            on=self._decide,
            attempts=policy.attempts,
            timeout=None,
            wait_initial=policy.backoff,
            wait_max=policy.max_backoff,
            wait_jitter=policy.backoff,
            wait_exp_base=2,
        ).__aiter__()

    def __aiter__(self) -> Tries:
        return self

    async def __anext__(self) -> stamina.Attempt:
        attempt = await self._attempts.__anext__()
        self.made = attempt.num
        return attempt

    def _decide(self, error: BaseException) -> bool | float:
        """stamina's backoff hook: ``False`` to raise ``error``, ``True`` for the policy's backoff, or the wait the
        server asked for."""
        if self.made >= self.policy.attempts or not self._retry_on(error):
            return False
        wait = self._asked(error)
        if wait is not None and self.policy.max_asked is not None:
            wait = min(wait, self.policy.max_asked)
        if self._on_retry is not None:
            self._on_retry(self.made, error, self.policy.wait_words(self.made, wait))
        return True if wait is None else wait
