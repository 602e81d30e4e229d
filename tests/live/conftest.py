"""The live views' tests run over every store, with the store suite's fixtures."""

from __future__ import annotations

from ..stores.conftest import opener, redis_url

__all__ = ["opener", "redis_url"]
