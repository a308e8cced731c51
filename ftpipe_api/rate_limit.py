"""Requests per API key: a token bucket per key, so that one tenant's loop cannot crowd the others out.

Per process: with several API replicas, each enforces the limit on the requests it receives.
"""

from __future__ import annotations

import threading
import time


class RateLimiter:
    def __init__(self, per_second: float = 20.0, burst: int = 60, clock=time.monotonic) -> None:
        self.per_second, self.burst, self.clock = per_second, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> float:
        """0 if the request may go ahead, else the seconds until it may (for Retry-After)."""
        with self._lock:
            now = self.clock()
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.per_second)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.per_second
