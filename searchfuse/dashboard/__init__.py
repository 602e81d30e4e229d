"""The dashboard: a read-only web page over a router's state, for people watching a fleet.

`searchfuse dashboard` (or [`serve`][searchfuse.dashboard.serve]) serves one page
(keys per provider with quota bars, pacing windows and cooldown countdowns, the
429 hold, the budgets, a timeline of 429s and moves down the chain, the newest
events) that polls `GET /api/status` (the same data as one JSON object: `keys`
as `searchfuse status --json` shows them, `hold`, `budgets`, `events` newest
first) and `GET /healthz` (open, no data). It only reads: every method but GET
is answered 405, and no request writes to the store, probes or searches. Keys
appear masked; every text is shown as text. It listens on loopback unless told
otherwise, and a host other than loopback needs a token.

```python
from searchfuse import Router
from searchfuse.dashboard import build_app

app = build_app(Router.from_env(), token="a-long-random-token")
# any ASGI server: uvicorn.run(app, host="127.0.0.1", port=8765)
```

Needs the `dashboard` extra (starlette and uvicorn): `pip install ".[dashboard]"`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from searchfuse._serving import StartRefused
from searchfuse.dashboard._rules import DEFAULT_POLL, DEFAULT_PORT, TOKEN_VARIABLE

if TYPE_CHECKING:
    from searchfuse.dashboard._app import build_app
    from searchfuse.dashboard._serve import running, serve

__all__ = [
    "DEFAULT_POLL",
    "DEFAULT_PORT",
    "TOKEN_VARIABLE",
    "StartRefused",
    "build_app",
    "running",
    "serve",
]

# The options need nothing but searchfuse; the app needs starlette.
_WHERE = {"build_app": "._app", "running": "._serve", "serve": "._serve"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
