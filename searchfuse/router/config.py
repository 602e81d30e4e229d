"""Where the router's keys come from: `config/keys.json` (v2 or legacy) or the environment.

Format v2:

```json
{"format_version": 2, "cooldown_minutes": 0.5,
 "keys": [{"key": "tvly-...", "account": "main@example.com", "notes": "main"}]}
```

Legacy files (`{"cooldown_minutes": 10, "keys": ["tvly-...", ...]}`, a bare
list of keys, or key objects with `source` instead of `account`) are
migrated to v2 on load: backup first, verify, then replace atomically.
"""

from __future__ import annotations

from searchfuse.router._env import config_from_env
from searchfuse.router._keys import (
    FORMAT_VERSION,
    Config,
    KeyEntry,
    key_rpm,
    keys_from,
    parse_config,
)
from searchfuse.router._keysfile import MAX_CONFIG_BYTES, MAX_DEPTH, load_config, render_config

__all__ = [
    "FORMAT_VERSION",
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "Config",
    "KeyEntry",
    "config_from_env",
    "key_rpm",
    "keys_from",
    "load_config",
    "parse_config",
    "render_config",
]
