"""`searchfuse.router.router`: where `Router` was defined; it lives in `_router` now."""

from searchfuse.router._options import On429
from searchfuse.router._router import Router

__all__ = ["On429", "Router"]
