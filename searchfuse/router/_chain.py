"""The chain: one `Core` per provider over one store, and when a call moves down it.

DESIGN's rules, in the order a call meets them:

1. A rate limit never moves a call down the chain. With `on_429="stop"` the
   provider's `RateLimited` and the hold's `CooldownActive` reach the caller
   (one transient 429 once pushed a whole agent session to its weakest
   provider, unannounced). With `"retry"` the bounded retries are spent first;
   then the limit is real and the next provider serves, and while the hold
   runs the held provider is passed over. With `"failover"` every key of the
   provider is tried first; then it is out of keys (rule 2).
2. A lasting failure passes a provider over: no key can serve
   (`NoKeyAvailable`: disabled, auth-cooled, exhausted, failing, breaker open),
   or the provider answers as misconfigured (a SearXNG instance with JSON
   output off: `ConfigError`, reason `"config"`).
3. Every move down is named: one WARNING when a provider starts being passed
   over (which, why, who serves instead), one INFO when it serves again, and
   `result["searchfuse"]["degraded"]` on every result meanwhile. Once per
   fleet: a move the store's event log already shows as the provider's latest
   (another process sharing the store named it) is not logged again.
4. Busy is not broken: a provider whose keys are all at their rate makes the
   call wait (`max_wait`), unless `overflow=True`, when the next provider
   with room serves at once (`degraded.reason == "overflow"`); the return of a
   provider that spills over is named once it served a minute without spilling.
5. A parameter a provider cannot honour (its `check` refuses it: a topic it
   has no index for, a `max_results` beyond its bound) passes that provider
   over for this call only; it is not a degradation of the provider. Only
   when every provider refuses does the caller see the first refusal.
6. The fallback function, if any, is the last link, under the same rules: it
   serves when every provider was passed over for a lasting failure or for
   the parameters (not while a rate limit holds), with the parameters as the
   caller gave them, and each provider passed over is named. Without one, the
   caller's `NoKeyAvailable` holds every provider's keys in its `reasons` and
   each provider's verdict in `diagnosis.by_provider` (the fallback's result:
   `result["searchfuse"]["by_provider"]`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from searchfuse._format import duration
from searchfuse._sansio import Step
from searchfuse._wire import short_text
from searchfuse.errors import (
    BadRequest,
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    Throttled,
)
from searchfuse.router._call import fall_back, request_flow
from searchfuse.router._core import Core
from searchfuse.router.policy import Outcome
from searchfuse.router.state import MAX_EVENTS, Availability, EventKind, KeyState

__all__ = ["Chain", "Passed", "Route"]

log = logging.getLogger("searchfuse.router")


@dataclass(frozen=True)
class Passed:
    """A provider a call went past, and why (a verdict, `"overflow"` or `"unsupported"`)."""

    name: str
    reason: str
    detail: str


#: Seconds between two looks at the store's event log, per provider served, for a move
#: down another router named (its return is then named within this delay).
FLEET_LOOK = 60.0
_DOWN = EventKind.PASSED_OVER
#: Seconds a busy provider serves without spilling over before its return is named: a
#: steady stream above its rate alternates between it and the next provider, and that
#: is one move down, not a WARNING and an INFO for every other search.
OVERFLOW_QUIET = 60.0

#: Why a provider whose keys cannot serve is passed over, by the diagnosis's verdict.
_WHY = {
    "auth": "every key was rejected (401/403)",
    "exhausted": "every key is out of quota",
    "upstream": "the service is failing",
    "config": "no key is configured or enabled",
    "cooling": "every key is cooling down",
    "burst": "every key is cooling down",
}

#: A cooling key's part of the verdict, by its cooldown's reason.
_COOLING = {
    str(Outcome.AUTH): "auth",
    str(Outcome.UPSTREAM): "upstream",
    str(Outcome.MISCONFIGURED): "config",
}

#: A provider's core and the body it would send (or its refusal of the parameters).
Checked = tuple[Core, Mapping[str, Any] | BadRequest]


@dataclass(frozen=True)
class Route:
    """One request checked against every provider of the chain (`Chain.check`)."""

    #: Each provider with the body it would send, or its refusal, in chain order.
    links: list[Checked]
    #: The parameters as the caller gave them (what the fallback function is given).
    asked: Mapping[str, Any]


@dataclass
class Chain:
    """The providers of one router, in the order they are tried."""

    cores: tuple[Core, ...]
    overflow: bool = False
    #: The providers being passed over now, and why: each move is logged once.
    _down: dict[str, str] = field(default_factory=dict)
    #: When this router last read the store's event log for each provider's moves.
    _looked: dict[str, float] = field(default_factory=dict)
    #: When each provider last spilled a call over to the next (rule 4).
    _spilled: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def first(self) -> Core:
        """The head of the chain (the only link of a single-provider router)."""
        return self.cores[0]

    def by_provider(self) -> Mapping[str, Core]:
        """Each provider's core, by name."""
        return {core.provider.name: core for core in self.cores}

    def check(self, endpoint: str, body: Mapping[str, Any]) -> Route:
        """`body` as each provider with `endpoint` would send it, or its refusal;
        raises the first refusal when no provider can send it (before anything runs)."""
        links = [core for core in self.cores if endpoint in core.provider.endpoints]
        if not links:
            self.first.provider.check(endpoint, body)  # the provider's own error
            raise ValueError(f"no configured provider has the endpoint {endpoint!r}")
        checked: list[Checked] = []
        for core in links:
            try:
                checked.append((core, core.provider.check(endpoint, body)))
            except BadRequest as exc:
                if exc.sent:
                    raise
                # One provider's bound (Brave's 20 results) is not every provider's.
                checked.append((core, exc))
        if all(isinstance(sent, BadRequest) for _, sent in checked):
            raise next(sent for _, sent in checked if isinstance(sent, BadRequest))
        asked = {k: v for k, v in body.items() if v is not None}
        return Route(checked, asked)

    def flow(
        self,
        endpoint: str,
        route: Route,
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> Generator[Step, Any, dict[str, Any]]:
        """One request down the chain (as `check` gave it): the first provider that can
        serve it does, else the fallback function."""
        passed: list[Passed] = []
        failure: NoKeyAvailable | None = None
        failed: Core | None = None
        for i, (core, sent) in enumerate(route.links):
            last = i == len(route.links) - 1
            if isinstance(sent, BadRequest):
                passed.append(Passed(core.provider.name, "unsupported", short_text(str(sent))))
                continue
            try:
                result = yield from request_flow(core, endpoint, sent, timeout, deadline)
            except (RateLimited, CooldownActive) as exc:
                if last or core.options.on_429 != "retry":
                    raise  # rule 1: a rate limit is the caller's to wait out
                why = f"rate-limited, held for {duration(exc.retry_after or 0.0)}"
                passed.append(Passed(core.provider.name, "cooling", why))
                continue
            except Throttled:
                if last or not self.overflow:
                    raise  # rule 4: busy is not broken
                why = "every key is at its rate"
                passed.append(Passed(core.provider.name, "overflow", why))
                continue
            except NoKeyAvailable as exc:
                failure, failed = _breakdown(exc, failure), core
                passed.append(_passed_for(core, exc))
                continue
            except (ConfigError, BadRequest) as exc:
                if last or (isinstance(exc, BadRequest) and not exc.sent):
                    raise
                # A misconfigured instance (SearXNG without JSON output) lasts: rule 2.
                # A request this provider refused (400) may be another's to serve: rule 5.
                passed.append(_refused(core, exc))
                continue
            _echo_query(result, route)
            self._note(passed, result)
            return result
        # Every provider was passed over: the fallback function is the last link.
        core = route.links[-1][0]
        by_provider = {p.name: p.reason for p in passed}
        if failure is not None and failure.diagnosis is not None:
            failure.diagnosis = dataclasses.replace(failure.diagnosis, by_provider=by_provider)
        if failure is None or failed is None or not self._falls_back(core, failed, endpoint):
            raise failure or _refusal(route)
        result = yield from fall_back(core, route.asked, failure)
        if len(self.cores) > 1:
            result["searchfuse"]["by_provider"] = by_provider
        # A router of one provider says so at construction and on each fallback (INFO),
        # as before chains: there is no chain to move down.
        self._note(passed if len(self.cores) > 1 else [], result)
        return result

    @staticmethod
    def _falls_back(core: Core, failed: Core, endpoint: str) -> bool:
        """Whether the fallback function may serve: it stands in for a search only,
        and never while a rate limit holds the provider that failed last (rule 1)."""
        if core.fallback is None or endpoint != core.provider.endpoints[0]:
            return False
        return not failed.ledger.rate_limited()

    def _note(self, passed: list[Passed], result: dict[str, Any]) -> None:
        """Name the moves down: in the result always, in the log when they start and end."""
        meta = result.setdefault("searchfuse", {})
        serving = str(meta.get("served_by") or "fallback")
        lasting = [p for p in passed if p.reason != "unsupported"]
        head = lasting[0] if lasting else (passed[0] if passed else None)
        meta["degraded"] = (
            None if head is None else {"from": head.name, "reason": head.reason, "serving": serving}
        )
        started, ended, down = self._moves(lasting, serving)
        if not down and self._fleet_look_due(serving) and self._said(serving, _DOWN):
            ended.append(serving)  # another router sharing the store named the move down
        titles = self.titles()
        for p in started:
            if self._said(p.name, EventKind.PASSED_OVER):
                continue  # another router sharing the store named this move already
            log.warning(
                "%s is passed over (%s: %s); %s serves instead",
                titles.get(p.name, p.name),
                p.reason,
                p.detail,
                titles.get(serving, serving),
            )
            why = f"{p.reason}: {p.detail}; {titles.get(serving, serving)} serves instead"
            self._log_event(EventKind.PASSED_OVER, p.name, why)
        for name in ended:
            if self._said(name, EventKind.SERVES_AGAIN):
                continue
            log.info("%s serves again", titles.get(name, name))
            self._log_event(EventKind.SERVES_AGAIN, name, "serves again")

    def _moves(self, lasting: list[Passed], serving: str) -> tuple[list[Passed], list[str], bool]:
        """The moves this call starts and ends in this router's memory of the chain, and
        whether `serving` is still down there (a busy provider that spilled over within
        `OVERFLOW_QUIET` seconds: its return is not named between two spills)."""
        started: list[Passed] = []
        ended: list[str] = []
        now = self.first.ledger.now()
        with self._lock:
            for p in lasting:
                if p.name not in self._down:  # a new reason while down is no new move
                    started.append(p)
                self._down[p.name] = p.reason
                if p.reason == "overflow":
                    self._spilled[p.name] = now
            reason = self._down.get(serving)
            spilled = self._spilled.get(serving, -math.inf)
            if reason is not None and (reason != "overflow" or now - spilled >= OVERFLOW_QUIET):
                del self._down[serving]
                ended.append(serving)
                reason = None
        return started, ended, reason is not None

    def _fleet_look_due(self, provider: str) -> bool:
        """Whether to read the store's event log for a move down of `provider` that
        another router named (at most once per `FLEET_LOOK` seconds per provider, not
        on every search), so that its return is named too and its next move down is
        not taken for the one already named."""
        if len(self.cores) == 1 or provider not in self.by_provider():
            return False
        now = self.first.ledger.now()
        with self._lock:
            if now - self._looked.get(provider, -math.inf) < FLEET_LOOK:
                return False
            self._looked[provider] = now
        return True

    def _said(self, provider: str, kind: str) -> bool:
        """Whether the store's event log already says `kind` is the latest move of
        `provider`: another process sharing the store named it, so the fleet logs each
        move once. (Read, not claimed in a transaction: two processes meeting the same
        move in the same instant may both name it; a move pushed out of the bounded log
        by newer events is named again.)"""
        try:
            events = self.first.ledger.events(MAX_EVENTS)
        except Exception:
            return False
        moves = (EventKind.PASSED_OVER, EventKind.SERVES_AGAIN)
        latest = next((e for e in events if e.provider == provider and e.kind in moves), None)
        return latest is not None and latest.kind == kind

    def _log_event(self, kind: str, provider: str, detail: str) -> None:
        """Keep a move down the chain (or back) in the store's event log, as the log
        line. The result is served whatever the store says."""
        core = self.by_provider().get(provider, self.first)
        try:
            core.ledger.note(kind, provider, detail)
        except Exception as exc:
            log.warning("could not log %s of %s in the state store (%s)", kind, provider, exc)

    def titles(self) -> dict[str, str]:
        """Each provider's name in messages."""
        return {core.provider.name: core.provider.title for core in self.cores}


def _echo_query(result: dict[str, Any], route: Route) -> None:
    """A normalised answer (the provider's own JSON under "raw") echoes the caller's
    query, not the provider's form of it (with `site:` operators added)."""
    asked = route.asked.get("query")
    if "raw" in result and isinstance(asked, str):
        result["query"] = asked


def _breakdown(exc: NoKeyAvailable, before: NoKeyAvailable | None) -> NoKeyAvailable:
    """`exc`, the latest provider's refusal, with the keys of the providers refused before
    it among its reasons (the caller of a chain that every provider refused sees them all)."""
    if before is not None:
        exc.reasons = {**before.reasons, **exc.reasons}
    return exc


def _passed_for(core: Core, exc: NoKeyAvailable) -> Passed:
    """Why a provider none of whose keys can serve is passed over: the refusal's
    verdict, or, when that verdict says a key could serve (`"stale"`: a flag the
    figures contradict), what the keys' records say now."""
    verdict = str(exc.diagnosis.verdict if exc.diagnosis is not None else "config")
    if verdict not in _WHY:
        now, cands = core.ledger.snapshot()
        kinds = {_kind(c.state, now) for c in cands}
        verdict = kinds.pop() if len(kinds) == 1 else "upstream"
    return Passed(core.provider.name, verdict, _WHY.get(verdict, "no key can serve"))


def _refused(core: Core, exc: ConfigError | BadRequest) -> Passed:
    """A provider that answered this request as misconfigured, or refused it."""
    if isinstance(exc, ConfigError):
        return Passed(core.provider.name, "config", short_text(exc.problem))
    return Passed(core.provider.name, "unsupported", short_text(exc.detail or str(exc)))


def _kind(ks: KeyState, now: float) -> str:
    """One key's part of a provider's verdict, from its availability."""
    availability = ks.availability(now)
    if availability is Availability.EXHAUSTED:
        return "exhausted"
    if availability is Availability.DISABLED:
        return "config"
    if availability is Availability.COOLING:
        return _COOLING.get(ks.cooldown_reason or "", "cooling")
    return "upstream"  # the state calls it available, and this call saw it fail


def _refusal(route: Route) -> Exception:
    """The first provider's refusal of the parameters (no provider could send them)."""
    return next(sent for _, sent in route.links if isinstance(sent, BadRequest))
