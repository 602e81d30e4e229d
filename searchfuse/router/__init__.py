"""The multi-key router: choose a key by real quota, react to every answer, explain.

The public names are [`Router`][searchfuse.Router], the config types, the stores
(`open_store` turns a `state=` value into one) and the status records; the
reaction table lives in `searchfuse.router.policy`. `SqliteStore` and
`RedisStore` are imported on first use, so `import searchfuse` loads neither
`sqlite3` nor `redis`.
"""

from typing import TYPE_CHECKING, Any

from searchfuse.router._router import Router
from searchfuse.router._spend import BudgetStatus
from searchfuse.router.config import Config, KeyEntry, config_from_env, load_config
from searchfuse.router.state import JsonFileStore, MemoryStore, Store, open_store
from searchfuse.router.status import Hold, KeyStatus, ProbeResult

if TYPE_CHECKING:
    from searchfuse.router.state import RedisStore, SqliteStore

__all__ = [
    "BudgetStatus",
    "Config",
    "Hold",
    "JsonFileStore",
    "KeyEntry",
    "KeyStatus",
    "MemoryStore",
    "ProbeResult",
    "RedisStore",
    "Router",
    "SqliteStore",
    "Store",
    "config_from_env",
    "load_config",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name in ("RedisStore", "SqliteStore"):
        from searchfuse.router import state

        return getattr(state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
