"""A smooth token-bucket rate limiter with the behaviour of Guava's ``RateLimiter.create(rate)`` + ``tryAcquire()``.

Why this shape: Apache RocketMQ 5.5.0's proxy limits SyncLiteSubscription PARTIAL_ADDs with one Guava limiter
(``maxSyncLiteSubscriptionRate`` per second, broker/lite.py) and answers TOO_MANY_REQUESTS when ``tryAcquire``
fails.  Guava's "smooth bursty" limiter starts with no stored permit, lets a request through whenever the
next free moment has come (a request may take the permit ahead of its time, pushing the next free moment
one interval on), and stores the permits of idle time up to one second's worth.  So after a quiet second
``rate + 1`` requests pass at once, then one every ``1 / rate`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RateLimiter:
    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self._clock = clock
        self._interval = 1.0 / rate
        self._max_stored = float(rate)  # one second of permits
        self._stored = 0.0
        self._next_free = clock()

    @property
    def rate(self) -> float:
        return 1.0 / self._interval

    def try_acquire(self) -> bool:
        """Take one permit now if one is free (no waiting); False when the caller is over the rate."""
        now = self._clock()
        if self._next_free > now:
            return False
        self._stored = min(self._max_stored, self._stored + (now - self._next_free) / self._interval)
        self._next_free = now
        spend = min(1.0, self._stored)
        self._stored -= spend
        self._next_free += (1.0 - spend) * self._interval
        return True
