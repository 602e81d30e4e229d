"""The multi-key Tavily router: choose a key by real quota, react to every answer, explain.

The public names are [`Router`][searchfuse.Router], the config types and the stores; the
reaction table lives in `searchfuse.router.policy`.
"""

from searchfuse.router._router import Router
from searchfuse.router.config import Config, KeyEntry, config_from_env, load_config
from searchfuse.router.state import JsonFileStore, MemoryStore, Store
from searchfuse.router.status import KeyStatus, ProbeResult

__all__ = [
    "Config",
    "JsonFileStore",
    "KeyEntry",
    "KeyStatus",
    "MemoryStore",
    "ProbeResult",
    "Router",
    "Store",
    "config_from_env",
    "load_config",
]
