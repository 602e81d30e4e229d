"""The guard's cache kept in the router's store (it lives in `searchfuse.router.state._cache`,
beside the stores it reads and writes)."""

from searchfuse.router.state._cache import SharedCache, cache_scope, stable_key

__all__ = ["SharedCache", "cache_scope", "stable_key"]
