"""One call as phases: pick -> sync usage -> grant -> send -> react -> retry | next key | stop.

`key_flow` is the loop over them; each phase reads and changes one call's
`Attempt` and asks the ledger for every store decision. Nothing here names a
provider: what a request looks like, what an answer means and what it cost
come from the `Provider` the router drives.

Bounded: at most `max_keys_per_call` keys, nothing after the call's deadline,
at most `max_wait` seconds of pacing waits and `MAX_WAIT` of retry waits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from searchfuse import _telemetry
from searchfuse._format import duration
from searchfuse._sansio import Step
from searchfuse.errors import CooldownActive, NoKeyAvailable, RateLimited, SearchFailed, Throttled
from searchfuse.providers._base import Classified
from searchfuse.router import _deadline, policy
from searchfuse.router._core import Core, classify, record_probe
from searchfuse.router._deadline import DeadlineExceeded
from searchfuse.router._observe import observe
from searchfuse.router._options import FIRST_RETRY_WAIT, RETRIES_ON_429
from searchfuse.router._refusals import broken, misconfigured, no_key, stopped
from searchfuse.router._spend import Charged
from searchfuse.router._steps import CallFn, Fallback, Probe, Returned, Send, Sleep
from searchfuse.router.config import KeyEntry
from searchfuse.router.policy import Outcome
from searchfuse.router.selection import blocked_reason
from searchfuse.router.state import State

__all__ = ["Attempt", "call_flow", "fall_back", "key_flow", "request_flow"]

log = logging.getLogger("searchfuse.router")

Flow = Generator[Step, Any, Any]


@dataclass
class Attempt:
    """One call's progress over the keys."""

    deadline: float | None
    credits: float
    #: Pacing waits go through the router's clock; the call's deadline is real time.
    wait_until: float
    tried: set[str] = field(default_factory=set)
    #: Why each tried key failed, by masked key.
    failures: dict[str, str] = field(default_factory=dict)
    failed: list[Outcome] = field(default_factory=list)
    #: Keys whose pacing window is full, and when each has room again.
    paced: dict[str, float] = field(default_factory=dict)
    #: The keys of `failures` that did not answer in time.
    slow: set[str] = field(default_factory=set)
    synced: bool = False
    waited: float = 0.0
    #: The request's kind for its price (`"search"`, `"extract"`...).
    kind: str = "search"
    granted_at: float | None = None  # when its pacing slot was last granted (router clock)

    def fail(self, entry: KeyEntry, why: str, outcome: Outcome | None) -> None:
        """`entry` cannot serve this call: the next key is tried."""
        self.tried.add(entry.fingerprint)
        self.failures[entry.masked] = why
        if outcome is not None:
            self.failed.append(outcome)

    @property
    def timed_out(self) -> bool:
        """Every key this call tried went unanswered in time."""
        return bool(self.failures) and self.slow >= self.failures.keys()


def _refuse(core: Core, call: Attempt, cut: str | None = None, **kw: Any) -> Exception:
    refusal = no_key(core.ledger, core.secrets, call.failures, call.failed, cut, **kw)
    return misconfigured(refusal, core.provider)


def key_flow(
    core: Core,
    make_step: Callable[[KeyEntry, float | None], Step],
    deadline: float | None = None,
    credits: float = 0.0,
    kind: str = "search",
) -> Generator[Step, Any, tuple[KeyEntry, Any, Charged | None]]:
    """Pick a key, sync it if due, run one step on it, react, fail over as the table says.

    Returns `(entry, outcome, charged)`: the key that served, the successful
    answer (a reply, or a `Returned`), and what was counted when the key was
    granted (`credits` expected; `None` without pacing).
    """
    options = core.options
    call = Attempt(deadline, credits, options.now() + options.max_wait, kind=kind)
    while True:
        if len(call.tried) >= options.max_keys_per_call:
            cut = f"a call tries at most {options.max_keys_per_call} key(s)"
            raise _refuse(core, call, cut, timed_out=call.timed_out)
        refusal = broken(core.ledger, core.breaker, core.secrets, core.provider)
        if refusal is not None:
            raise refusal
        entry, state, now = yield from _pick(core, call)
        if entry is None or not (yield from _sync(core, call, entry, state, now)):
            continue
        if _deadline.past(deadline):
            cut = f"the deadline of {options.deadline:g} s passed"
            raise _refuse(core, call, cut, timed_out=True)
        granted, charged = _grant(core, call, entry, now)
        if not granted:
            continue
        served = yield from _send(core, call, entry, make_step, charged)
        if served is not None:
            return served


def _pick(core: Core, call: Attempt) -> Generator[Step, Any, tuple[KeyEntry | None, State, float]]:
    """The key to try next; with every usable key at its rate, wait for room (or refuse)."""
    pick = core.ledger.pick(call.tried | call.paced.keys())
    if pick.held is not None:
        left, masked = pick.held
        raise CooldownActive(left, cause=f"rate limit (429 on {masked or 'a key'})")
    if pick.entry is not None:
        return pick.entry, pick.state, pick.now
    if not call.paced:
        raise _refuse(core, call, timed_out=call.timed_out)
    # Every key that could serve is at its rate: wait for the first to have room,
    # within max_wait; never send what would be a 429. A wait that would outlast
    # max_wait or the call's deadline is refused now, not slept through and then refused.
    wait = max(0.0, min(call.paced.values()) - pick.now)
    if pick.now + wait > call.wait_until or _deadline.past(call.deadline, wait):
        raise Throttled(retry_after=wait)
    _telemetry.paced_wait(wait)
    yield Sleep(wait)
    call.paced.clear()
    return None, pick.state, pick.now


def _sync(
    core: Core, call: Attempt, entry: KeyEntry, state: State, now: float
) -> Generator[Step, Any, bool]:
    """Refresh the key's figures with the provider's free probe when due (once per call).

    False when the probe shows the key cannot serve (the next key is tried).
    """
    ledger, rate = core.ledger, core.provider.probe_rate
    if call.synced or rate is None:
        return True
    if not ledger.sync_due(entry, state, now):
        return True
    state = ledger.view(now)  # the figures may be newer than the pick's view
    if not ledger.sync_due(entry, state, now):
        return True
    if ledger.claim_probe(entry, rate.requests, rate.window, stale_only=True) is not None:
        return True  # another search of the burst syncs it, or the probe's limit is used
    call.synced = True
    status, outcome = record_probe(core, entry, (yield Probe(entry)))
    if outcome is Outcome.AUTH or outcome is Outcome.EXHAUSTED:
        probe = core.provider.probe()
        call.fail(entry, f"{probe.path if probe else 'the probe'} answered {status}", outcome)
        return False
    # Any other failure of the probe (5xx, 404, a redirect, no answer): it is an
    # optimisation, the search goes ahead on this key.
    now = ledger.now()
    why = blocked_reason(ledger.fresh(entry, now), now)
    if why is not None:
        # The fresh figures say this key is spent; the next one is not synced in
        # the same search (one probe per search at most, incident 3).
        call.fail(entry, why or "exhausted", Outcome.EXHAUSTED)
        return False
    return True


def _grant(core: Core, call: Attempt, entry: KeyEntry, now: float) -> tuple[bool, Charged | None]:
    """Ask the ledger for the key's pacing slot (and count the search in advance,
    on the key and on the budgets)."""
    if not core.options.pace and not core.spend.active:
        return True, None
    spent = core.spend.plan(core.provider.name, call.kind, entry, call.credits, now)
    call.granted_at = core.options.now()
    grant = core.ledger.grant(entry, call.credits, spend=spent.lines)
    if grant.verdict == "budget":
        raise core.spend.refusal(grant, now)
    if grant.verdict == "held":
        masked = core.ledger.masked(grant.hold_key)
        raise CooldownActive(grant.wait, cause=f"rate limit (429 on {masked})")
    if grant.verdict == "paced":
        call.paced[entry.fingerprint] = now + grant.wait
        return False, None
    if grant.verdict == "blocked":
        # Another process parked it since our snapshot.
        call.fail(entry, str(grant.availability), None)
        return False, None
    return True, Charged(call.credits, grant.clean, spent.granted(grant.spent))


def _send(
    core: Core,
    call: Attempt,
    entry: KeyEntry,
    make_step: Callable[[KeyEntry, float | None], Step],
    charged: Charged | None,
) -> Generator[Step, Any, tuple[KeyEntry, Any, Charged | None] | None]:
    """Send on `entry` (retrying a 429 on it if the policy says so) and react.

    Returns the served outcome, or `None` when the next key is to be tried.
    """
    attempt = 0
    while True:
        result = yield make_step(entry, call.granted_at)
        if isinstance(result, Returned):
            core.breaker.succeeded()
            return entry, result, charged
        try:
            answer = classify(core, result)
        except BaseException:
            if charged is not None:
                core.ledger.refund(entry, charged)  # the caller's own function failed
            raise
        if answer.outcome is Outcome.OK:
            core.breaker.succeeded()
            return entry, result, charged
        observe(core, entry, result)
        wait = _retry_wait(core, call, answer, attempt)
        if wait is None:
            break
        retried = yield from _retry(core, call, entry, answer, charged, wait)
        charged = None if retried is False else retried
        if retried is False:
            break
        attempt += 1
    _react(core, call, entry, answer, result, charged)
    return None


def _retry_wait(core: Core, call: Attempt, answer: Classified, attempt: int) -> float | None:
    """How long to wait before retrying a 429 on the same key (`None`: no retry).

    A server's Retry-After wins over our doubling: a retry it would refuse is not
    sent; all waits of one call together stay within MAX_WAIT, and the deadline.
    """
    reaction = policy.reaction(answer.outcome, core.provider.key_is_url)
    if reaction.failover is not None or core.options.on_429 != "retry":
        return None
    if attempt >= RETRIES_ON_429:
        return None
    left = policy.MAX_WAIT - call.waited
    wait = answer.retry_after
    if wait is None:
        wait = min(FIRST_RETRY_WAIT * 2**attempt, left)
    wait = max(wait, 0.0)
    if 0 < wait <= left and not _deadline.past(call.deadline, wait):
        return wait
    return None


def _retry(
    core: Core,
    call: Attempt,
    entry: KeyEntry,
    answer: Classified,
    charged: Charged | None,
    wait: float,
) -> Generator[Step, Any, Charged | Literal[False] | None]:
    """Hold the router, wait, and take a new slot for the retry (`False`: no room)."""
    # The router is held meanwhile, as for "stop": the rest of the burst is refused
    # without a request. Only the call whose 429 came first retries; one that finds
    # a hold already running stops.
    owns = core.ledger.react(entry, answer, park=False, refund=charged, retry_hold=wait)
    held = core.ledger.hold()[0]
    if not owns and held > 0:
        raise RateLimited(retry_after=held, key=entry.masked)
    # Not owned, and no hold of this provider's runs: the store's hold is another
    # provider's of the chain (it passed over that one), which is no reason to skip ours.
    call.waited += wait
    yield Sleep(wait)
    if not core.options.pace and not core.spend.active:
        return None
    # The hold it set is this retry's own: not honoured.
    spent = core.spend.plan(core.provider.name, call.kind, entry, call.credits, core.ledger.now())
    call.granted_at = core.options.now()
    grant = core.ledger.grant(entry, call.credits, honour_hold=False, spend=spent.lines)
    if grant.verdict != "ok":
        return False  # no room for the retry (or budget): stop as after the last retry
    return Charged(call.credits, grant.clean, spent.granted(grant.spent))


def _react(
    core: Core,
    call: Attempt,
    entry: KeyEntry,
    answer: Classified,
    result: Any,
    charged: Charged | None,
) -> None:
    """Record the failure; raise when the table says stop, else leave it for the next key."""
    reaction = policy.reaction(answer.outcome, core.provider.key_is_url)
    # An answer that stopped coming may have been served, and charged: it stays
    # counted (counters err on the side of quota spent).
    cooldown = core.ledger.react(entry, answer, refund=None if _maybe_served(result) else charged)
    pause = core.options.cooldown_seconds
    # An answer with another meaning (Serper's 429: a rate limit, or credits run out)
    # that a pause did not cure was parked longer: it is read as its other meaning.
    uncured = answer.alternative is not None and cooldown > reaction.park_seconds(
        answer.retry_after, pause
    )
    if reaction.trips_breaker and core.breaker.failed(core.ledger.now(), pause):
        log.warning(
            "%s failed %d times in a row; every request pauses for %s",
            core.provider.title,
            core.breaker.threshold,
            duration(pause),
        )
    if reaction.failover is False:
        raise stopped(answer, result, core.provider, core.http.base_url, core.environ)
    if reaction.failover is None and core.options.on_429 != "failover" and not uncured:
        # A burst that 429s one key 429s them all (incident 1): stop here, and hold
        # the whole router so the rest of the burst cannot walk through the other keys.
        raise RateLimited(retry_after=cooldown, key=entry.masked)
    detail = f" ({answer.detail})" if answer.detail else ""
    outcome = answer.alternative if uncured and answer.alternative else answer.outcome
    call.fail(entry, f"{answer.status or 'no answer'} {answer.outcome}{detail}", outcome)
    if isinstance(result, httpx.TimeoutException | TimeoutError):
        call.slow.add(entry.masked)


def _maybe_served(result: object) -> bool:
    """True when the request reached the provider and its answer broke off (maybe served)."""
    return isinstance(
        result, httpx.ReadTimeout | httpx.ReadError | httpx.RemoteProtocolError | DeadlineExceeded
    )


def request_flow(
    core: Core,
    path: str,
    body: Mapping[str, Any],
    timeout: float | None = None,
    deadline: float | None = None,
) -> Generator[Step, Any, dict[str, Any]]:
    """A request to one of the provider's endpoints, served by one of its keys."""
    provider = core.provider
    request = provider.build(path, body)
    entry, reply, charged = yield from key_flow(
        core,
        lambda e, granted_at: Send(e, request, timeout, granted_at),
        deadline,
        provider.cost(path, body, None),
        path.strip("/"),
    )
    try:
        data = reply.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        failure = Classified(Outcome.UPSTREAM, 200, "answer was not a JSON object", None)
        core.ledger.react(entry, failure, refund=charged)
        raise SearchFailed(
            f"{provider.title} answered {reply.status_code} with a body that is not a JSON object"
        )
    spent = core.ledger.settle(entry, charged, provider.cost(path, body, data), data)
    # What the answer's headers say of the key (Brave: the month's last search) is
    # applied after the success is settled, which would otherwise clear it.
    observe(core, entry, reply)
    result = provider.normalize(path, data, body)
    result["searchfuse"] = {"served_by": provider.name, "key": entry.masked, "degraded": None}
    if spent:
        result["searchfuse"]["budgets"] = core.spend.report(spent)
    return result


def fall_back(
    core: Core, body: Mapping[str, Any], exc: NoKeyAvailable
) -> Generator[Step, Any, dict[str, Any]]:
    """The fallback function's answer to `body` (the caller's parameters), when no
    provider's key can serve (`exc` says why)."""
    verdict = str(exc.diagnosis.verdict) if exc.diagnosis is not None else None
    log.info("no key can serve (%s); the fallback %s serves", verdict, core.fallback_name())
    assert core.fallback is not None
    served = yield Fallback(body, core.fallback)
    result = dict(served) if isinstance(served, dict) else {"results": served}
    result["searchfuse"] = {
        "served_by": "fallback",
        "fallback": core.fallback_name(),
        "reason": verdict,
        "degraded": None,
    }
    return result


def call_flow(core: Core, deadline: float | None = None) -> Flow:
    """`Router.call`: the caller's function run with the chosen key."""
    entry, returned, charged = yield from key_flow(core, lambda e, _: CallFn(e), deadline)
    core.ledger.settle(entry, charged, 0.0)
    return returned.value
