"""The gateway: Tavily's own API in front of the router, for clients in any language.

`searchfuse gateway` (or [`serve`][searchfuse.gateway.serve]) answers
`POST /search`, `/extract`, `/crawl`, `/map` and `GET /usage` as Tavily does,
plus `GET /healthz`, so tavily-python (`api_base_url=`), tavily-js,
langchain-tavily, tavily-mcp or an agent's built-in Tavily provider get the
key pool, pacing, the 429 hold, the shared cache and budgets by changing their
base URL only. Clients' tokens stay at the gateway; only the pool's keys go
upstream, and never back.

```python
from searchfuse import Router
from searchfuse.gateway import build_app

app = build_app(Router.from_env(), tokens={"alice": "a-long-random-token"})
# any ASGI server: uvicorn.run(app, host="127.0.0.1", port=8766)
```

Needs the `gateway` extra (starlette and uvicorn): `pip install ".[gateway]"`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from searchfuse._serving import ClientTokens, StartRefused
from searchfuse.gateway._limits import (
    DEFAULT_CONCURRENCY,
    DEFAULT_DEADLINE,
    DEFAULT_PORT,
    ENDPOINTS,
    MAX_BODY,
)

if TYPE_CHECKING:
    from searchfuse.gateway._app import build_app
    from searchfuse.gateway._errors import ERRORS, Answer, Row, answer_for
    from searchfuse.gateway._identity import Caller, caller_of, spend_scope_for
    from searchfuse.gateway._serve import running, serve

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_DEADLINE",
    "DEFAULT_PORT",
    "ENDPOINTS",
    "ERRORS",
    "MAX_BODY",
    "Answer",
    "Caller",
    "ClientTokens",
    "Row",
    "StartRefused",
    "answer_for",
    "build_app",
    "caller_of",
    "running",
    "serve",
    "spend_scope_for",
]

# The table and the ids need nothing but searchfuse; the app needs starlette.
_WHERE = {
    "ERRORS": "._errors",
    "Answer": "._errors",
    "Row": "._errors",
    "answer_for": "._errors",
    "Caller": "._identity",
    "caller_of": "._identity",
    "spend_scope_for": "._identity",
    "serve": "._serve",
    "running": "._serve",
}

INSTALL_HINT = 'the gateway needs starlette and uvicorn: pip install ".[gateway]"'


def __getattr__(name: str) -> Any:
    """Load a public name on first use; the app's names need the `gateway` extra."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _WHERE.get(name, "._app")
    try:
        value = getattr(importlib.import_module(module, __name__), name)
    except ImportError as exc:
        if exc.name not in ("starlette", "uvicorn") and not str(exc.name).startswith(
            ("starlette.", "uvicorn.")
        ):
            raise
        raise ImportError(INSTALL_HINT, name=exc.name) from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
