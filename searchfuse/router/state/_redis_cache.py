"""A Redis store's errors and its shared cache: entries kept with expiry on the
router's clock, and the claims that let one process search while the others wait."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

from searchfuse.errors import StoreUnavailable
from searchfuse.router.state._redis_types import RedisNames, reset_wrong_types, wrong_type

__all__ = ["RedisBase"]

R = TypeVar("R")


class RedisBase(RedisNames):
    """What `RedisStore` is made of besides its transactions: `_call` (errors named,
    wrong-typed keys reset) and the shared cache."""

    url: str
    client: Any
    _redis: Any
    _release: Any

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(
            self.url,
            f"cannot be reached ({type(exc).__name__})",
            "Start Redis or fix the URL; searchfuse does not fall back to local state on "
            "its own (use state=None or a file path for that)",
        )

    def _call(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        for attempt in range(2):
            try:
                return fn(*args, **kwargs)
            except self._redis.WatchError:
                raise
            except (self._redis.ConnectionError, self._redis.TimeoutError) as exc:
                raise self._unavailable(exc) from None
            except self._redis.ResponseError as exc:
                # A key of ours holding another type: reset it (named in the log), once.
                if attempt or not wrong_type(exc) or not self._reset_wrong_types():
                    raise self._answered(exc) from None
            except self._redis.RedisError as exc:
                raise self._answered(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _reset_wrong_types(self) -> list[str]:
        try:
            return reset_wrong_types(self.client, self.ns)
        except (self._redis.ConnectionError, self._redis.TimeoutError) as exc:
            raise self._unavailable(exc) from None
        except self._redis.RedisError as exc:
            raise self._answered(exc) from None

    def _answered(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(
            self.url,
            f"answered an error ({type(exc).__name__}: {str(exc)[:120]})",
            "check the server",
        )

    # -- the shared cache --------------------------------------------------------------------

    def cache_get(self, key: str, now: float) -> str | None:
        raw = self._call(self.client.get, self._cache(key))
        if raw is None:
            return None
        try:
            value, expires = json.loads(raw)
        except (ValueError, TypeError):
            return None
        if not isinstance(value, str) or not isinstance(expires, int | float) or expires <= now:
            return None
        return value

    def cache_set(
        self, key: str, value: str, expires_at: float, maxsize: int, *, now: float | None = None
    ) -> None:
        # Expiry is decided on the router's clock (stored with the value); Redis's
        # own TTL, counted from now on the server, only collects the entry later:
        # it is the entry's length on the writer's clock (a test clock months
        # behind would otherwise make it a second), with a minute to spare.
        left = expires_at - (time.time() if now is None else now)
        ttl_ms = max(1000, math.ceil(left * 1000) + 60_000)

        def put() -> None:
            with self.client.pipeline() as pipe:
                pipe.set(self._cache(key), json.dumps([value, expires_at]), px=ttl_ms)
                pipe.zadd(self._cache_index, {key: expires_at})
                pipe.execute()
            extra = self.client.zcard(self._cache_index) - max(1, maxsize)
            if extra > 0:
                oldest = self.client.zrange(self._cache_index, 0, extra - 1)
                if oldest:
                    with self.client.pipeline() as pipe:
                        pipe.delete(*[self._cache(k) for k in oldest])
                        pipe.zrem(self._cache_index, *oldest)
                        pipe.execute()

        self._call(put)

    def cache_delete(self, key: str) -> None:
        def drop() -> None:
            with self.client.pipeline() as pipe:
                pipe.delete(self._cache(key))
                pipe.zrem(self._cache_index, key)
                pipe.execute()

        self._call(drop)

    def cache_keys(self, now: float) -> list[str]:
        return list(self._call(self.client.zrangebyscore, self._cache_index, f"({now}", "+inf"))

    def cache_claim(self, key: str, owner: str, until: float) -> bool:
        ms = math.ceil((until - time.time()) * 1000)
        if ms <= 0:
            return True  # a claim that has already run out holds nothing
        name = f"{self.ns}:claim:{key}"
        taken = self._call(self.client.set, name, owner, nx=True, px=ms)
        return bool(taken) or self._call(self.client.get, name) == owner

    def cache_release(self, key: str, owner: str) -> None:
        self._call(self._release, keys=[f"{self.ns}:claim:{key}"], args=[owner])
