"""The router-wide circuit breaker: after repeated upstream failures, refuse for a while."""

from __future__ import annotations

import threading

__all__ = ["Breaker"]


class Breaker:
    """Router-wide: after `threshold` upstream failures in a row, refuse for a while.

    Per-key cooldowns stop one call from asking a failing key twice; the breaker
    stops the next calls from walking through the remaining keys of a provider
    that is failing for everyone. A success closes it; after a pause, one
    failure opens it again.
    """

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.failures = 0
        self.open_until: float | None = None
        self._lock = threading.Lock()

    def left(self, now: float) -> float:
        """Seconds the breaker stays open (0.0 when closed)."""
        with self._lock:
            return 0.0 if self.open_until is None else max(0.0, self.open_until - now)

    def failed(self, now: float, pause: float) -> bool:
        """Count one upstream failure; True when it opens the breaker."""
        with self._lock:
            self.failures += 1
            if self.failures < self.threshold or pause <= 0:
                return False
            self.open_until = now + pause
            self.failures = self.threshold - 1
            return True

    def succeeded(self) -> None:
        """A served answer: the failures in a row start again from zero."""
        with self._lock:
            self.failures = 0
            self.open_until = None
