"""What `searchfuse status --watch` and the dashboard show: one read of a router's store.

A [`Snapshot`][searchfuse._live.Snapshot] is every key as `status --json` shows it
(state, usage, pacing window, cooldown, last error), the router-wide hold after a
429, the budgets and the newest events, all from one router's view of the store
that every process shares. Taking one only reads: no probe, no search, no write.
Keys appear masked only, and every text in it is redacted with the router's keys
once more (a key pasted into a note or echoed in an error never shows).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from searchfuse._secrets import redact_tree
from searchfuse.errors import SearchFailed
from searchfuse.router.state._events import _iso as iso_time

if TYPE_CHECKING:
    from searchfuse.router import Router

__all__ = [
    "EVENTS_SHOWN",
    "Snapshot",
    "Viewer",
    "budget_report",
    "iso_time",
    "snapshot",
    "stopped_by_sigterm",
    "viewer_for",
]

#: How many of the newest events a snapshot carries.
EVENTS_SHOWN = 50


@dataclass(frozen=True)
class Snapshot:
    """One look at the store, as JSON-ready data (see the module docstring).

    `now` is the router's clock when it was taken; `error` says why the store
    could not be read (then the rest is empty and the next look tries again);
    `note` says what else a person watching should know (no state file yet).
    """

    now: float
    keys: list[dict[str, Any]] = field(default_factory=list)
    hold: dict[str, Any] | None = None
    budgets: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What `GET /api/status` answers."""
        return {
            "time": iso_time(self.now),
            "now": self.now,
            "keys": self.keys,
            "hold": self.hold,
            "budgets": self.budgets,
            "events": self.events,
            "error": self.error,
            "note": self.note,
        }


def budget_report(router: Router, now: float) -> list[dict[str, Any]]:
    """Every budget of `router`, in its order, as `searchfuse status --budgets --json`
    shows it ([`BudgetStatus.to_dict`][searchfuse.router.BudgetStatus.to_dict]),
    with its line of `status --budgets` as `summary`.

    A budget counting every caller (`per="router"`) has its `used` and `left`; one
    per conversation or per user summarises its spenders instead: how many spent
    something this period (`spenders`), how many used it all (`exhausted`) and the
    most spending (`top`). Read through [`Router.budgets`][searchfuse.Router.budgets],
    which takes no write lock.
    """
    return [row.to_dict() | {"summary": row.summary(now)} for row in router.budgets()]


def snapshot(router: Router, events: int = EVENTS_SHOWN) -> Snapshot:
    """Everything the live views show, read once from `router`'s store.

    A store that cannot be read (Redis down, a locked database) gives a snapshot
    with `error` set instead of raising: a view keeps running and tries again.
    """
    now = router.now()
    try:
        keys = [record.to_dict() for record in router.status()]
        hold = router.hold()
        budgets = budget_report(router, now)
        log = [event.to_dict() for event in router.events(events)]
    except (SearchFailed, OSError) as exc:
        error = f"cannot read the state store: {exc}"
        return Snapshot(now, error=redact_tree(error, _keys(router)))
    shown = {"keys": keys, "hold": None if hold is None else hold.to_dict()}
    shown.update(budgets=budgets, events=log)
    return Snapshot(now, **redact_tree(shown, _keys(router)))


def _keys(router: Router) -> tuple[str, ...]:
    return tuple(entry.key for entry in router.keys)


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM (a service manager's stop, `kill`) ends the block as Ctrl-C does: with
    a `KeyboardInterrupt`, which a live view answers with exit code 0, instead of
    the process dying by the signal. Only in the main thread (where signals land)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Viewer:
    """A router opened for looking only, as the commands `status --watch` and
    `dashboard` open it: `open_router()` builds the router over the state the
    options name (`state`), `open_router(memory=True)` one over a state in memory.

    A state file that does not exist yet is not created by looking: until a
    search creates it, the keys are shown as configured (from a router in
    memory) with a note saying so, and each read looks for the file again.
    """

    def __init__(self, open_router: Callable[..., Router], state: object) -> None:
        self._open = open_router
        self.missing = _missing_file(state)
        self.path = _state_file(state)
        # A state file this user cannot write (a service's, a read-only disk) is
        # looked at through a private copy made for each look: a store writes even
        # to read, and a copy made once would never show what happens next.
        blocked = self.missing is None and self.path is not None and _blocked(self.path)
        self.router = open_router(memory=True) if self.missing or blocked else open_router()

    def snapshot(self, events: int = EVENTS_SHOWN) -> Snapshot:
        """What the views show now (see [`snapshot`][searchfuse._live.snapshot])."""
        if self.missing is not None and self.missing.exists():
            router, self.router, self.missing = self.router, self._open(), None
            router.close()
        if self.missing is None and self.path is not None:
            why = _blocked(self.path)
            if why is not None:
                return self._through_a_copy(self.path, why, events)
        snap = snapshot(self.router, events)
        if self.missing is None:
            return snap
        note = (
            f"no state at {self.missing} yet: nothing has been recorded there, so every key "
            "is shown as configured; it is read as soon as a search creates it "
            "(looking creates nothing)"
        )
        return replace(snap, note=note)

    def _through_a_copy(self, path: Path, why: str, events: int) -> Snapshot:
        import tempfile

        from searchfuse import _readonly

        with tempfile.TemporaryDirectory(prefix="searchfuse-") as folder:
            try:
                copy = _readonly.private_copy(path, Path(folder))
            except OSError as exc:
                error = f"cannot read the router state at {path} ({exc.strerror or exc})"
                return Snapshot(self.router.now(), error=error)
            router = self._open(state=copy)
            try:
                snap = snapshot(router, events)
            finally:
                router.close()
        note = (
            f"{path} cannot be written ({why}), so each look reads a private copy of it; "
            "nothing is written there"
        )
        return replace(snap, note=note)

    @property
    def keys(self) -> tuple[str, ...]:
        """The router's keys (for checks such as "a token is no key")."""
        return _keys(self.router)

    def close(self) -> None:
        self.router.close()


def _state_file(state: object) -> Path | None:
    """The absolute path of the state file `state` names (`None`: a URL, or none)."""
    if not isinstance(state, str | os.PathLike) or "://" in os.fspath(state):
        return None
    return Path(os.fspath(state)).absolute()


def _blocked(path: Path) -> str | None:
    """Why this user may not write state file `path` (and its sidecars), else `None`."""
    from searchfuse import _readonly

    return _readonly.blocked_write(path)


def _missing_file(state: object) -> Path | None:
    """The absolute path of a state file `state` names that does not exist, else `None`."""
    if not isinstance(state, str | os.PathLike) or "://" in os.fspath(state):
        return None
    path = Path(os.fspath(state)).absolute()
    return None if path.exists() else path


def viewer_for(args: Any, make_router: Callable[..., Router]) -> Viewer:
    """The [`Viewer`][searchfuse._live.Viewer] of the router the command line's options
    describe (`make_router` is the CLI's)."""
    from searchfuse.cli import _config_path, _state_location

    def open_router(memory: bool = False, state: Path | None = None) -> Router:
        if memory:
            return make_router(args, state=None)
        return make_router(args) if state is None else make_router(args, state=state)

    return Viewer(open_router, _state_location(args, _config_path(args)))
