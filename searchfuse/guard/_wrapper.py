"""The wrapt proxy a guarded tool is (imported on first use: wrapt's import is not free)."""

from __future__ import annotations

from typing import Any

import wrapt

from searchfuse.guard.core import Guard, GuardState

__all__ = ["GuardedFunction"]


class GuardedFunction(wrapt.FunctionWrapper[..., Any]):
    """A guarded tool. Call it exactly like the callable it wraps.

    It keeps the wrapped callable's signature, name, docstring,
    `__wrapped__` and coroutine-ness, binds as a method, classmethod or
    static method like the original, and adds
    [`guard_state`][searchfuse.guard.GuardedFunction.guard_state] and
    [`guard`][searchfuse.guard.GuardedFunction.guard].
    """

    # No class-level annotation for `_self_guard`: it would give the proxy an
    # `__annotations__` of its own and hide the wrapped function's.

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        # A plain function called directly: hand the call to the guard at once.
        # wrapt's own __call__ first looks for `__wrapped__.__self__`, and on
        # a function that failed lookup (an AttributeError raised and dropped)
        # costs more than all of the guard's rules on a cache hit.
        direct = self._self_direct
        if direct is not None:
            return direct(self.__wrapped__, None, args, kwargs)
        return super().__call__(*args, **kwargs)

    @property
    def guard(self) -> Guard:
        """The [`Guard`][searchfuse.Guard] holding this tool's rules and state."""
        core: Guard = self._self_guard
        return core

    def guard_state(self) -> GuardState:
        """What the guard knows now: turn count, fuse, cooldown left, cache size, counters."""
        core: Guard = self._self_guard
        return core.state()
