"""`Router`: the public face of the router. Each method is "body -> flow -> drive".

The work is elsewhere: `_options` (what it was told), `_ledger` (the store),
`_call` (one call as phases), `_admin` (status, probe, diagnosis), `_steps`
(the I/O and its drivers), the `Provider` (what the API looks like).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Hashable, Mapping, MutableMapping, Sequence
from typing import Any, TypeVar

import httpx

from searchfuse import _telemetry
from searchfuse._secrets import KnownKeys, redact
from searchfuse._spend import Budget
from searchfuse.errors import ConfigError
from searchfuse.router import _admin, _chainbuild, _chainview, _deadline
from searchfuse.router._call import call_flow
from searchfuse.router._keysfile import default_state
from searchfuse.router._options import (
    DEFAULT_BREAKER_THRESHOLD,
    DEFAULT_DEADLINE,
    DEFAULT_MAX_KEYS_PER_CALL,
    DEFAULT_MAX_WAIT,
    DEFAULT_SYNC_INTERVAL,
    On429,
    RouterOptions,
    check_timeout,
)
from searchfuse.router._spend import BudgetReports, Spend
from searchfuse.router._steps import adrive, drive
from searchfuse.router.config import (
    Config,
    KeyEntry,
    config_from_env,
    keys_from,
    load_config,
)
from searchfuse.router.diagnose import Diagnosis
from searchfuse.router.state import Event, Store, cache_scope, open_owned
from searchfuse.router.status import Hold, KeyStatus, ProbeResult

__all__ = ["On429", "Router"]

T = TypeVar("T")


class Router(BudgetReports):
    """A quota-aware pool of search keys: Tavily's, and a chain of other providers behind them.

    ```python
    router = Router(["tvly-dev-test0001", "tvly-dev-test0002"], state="state/quota.json")
    result = router.search("python 3.13 release date", max_results=3)
    ```

    Keys are chosen by real remaining quota; invalid, rate-limited, exhausted and cooling keys
    are skipped; each answer updates its key's state by `searchfuse.router.policy.REACTIONS`.

    `search` returns Tavily's JSON as a dict, with an extra `"searchfuse"` entry
    saying who served it (`{"served_by": "tavily", "key": "tvly-dev-…0001"}`). It
    raises [`RateLimited`][searchfuse.errors.RateLimited] on a 429 (default policy),
    [`BadRequest`][searchfuse.errors.BadRequest] on a 400 and
    [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable] when no key can serve.
    `request` posts to another of Tavily's `ENDPOINTS` with the same key
    selection, reactions and fail-over (its `timeout` is the time that request
    may take, replacing the HTTP timeouts and, when longer, the call's
    deadline: a crawl may take minutes). `call(fn)` runs `fn(key)` with the
    chosen key and learns from its outcome: a return is a success, an exception
    is classified like an HTTP answer (`httpx.HTTPStatusError`, tavily-python's
    errors, anything with a `status_code`). `test_keys` and `diagnose(probe=True)`
    ask `/usage` one key at a time and never search. Every method has an async
    twin (`asearch`, `arequest`, `acall`, `atest_keys`, `adiagnose`, `aclose`).

    Args:
        keys: API keys (strings or [`KeyEntry`][searchfuse.router.KeyEntry]), or a
            [`Config`][searchfuse.router.Config].
        state: a path (SQLite; the JSON file store for `.json`), a Redis URL, a
            [`Store`][searchfuse.router.Store], or `None` for in-memory state.
        base_url: Tavily's address; `TAVILY_BASE_URL` overrides the default.
        clock: zero-argument callable returning epoch seconds.
        sleep: how to wait between retries (default: real sleep, or the
            testing clock under [`searchfuse.testing.set_testing`][searchfuse.testing.set_testing]).
        on_429: `"stop"` (raise [`RateLimited`][searchfuse.errors.RateLimited], try no other key),
            `"retry"` (two retries on the same key, then stop) or
            `"failover"` (try the next key).
        cooldown_minutes: fallback cooldown (float); defaults to the config's
            value, else 1.0.
        timeout: httpx timeout for each request.
        sync_interval: seconds after which a key's `/usage` figures are stale.
        transport: the httpx transport for `search` and friends (the test seam).
        async_transport: the httpx transport for `asearch` and friends.
        fallback: `fallback(query, max_results=..., **params) -> dict` (sync or
            async), used only when no key can serve for a reason other than a
            rate limit (auth failure, exhausted quota, Tavily failing).
        pace: keep every key within its request rate (`keys[].rpm`, else
            `SEARCHFUSE_RPM`, else Tavily's published limit), across every
            process sharing the store; `False` turns pacing off.
        max_wait: the longest a call waits for a key to have room (through
            `clock` and `sleep`) before raising [`Throttled`][searchfuse.errors.Throttled].
        deadline: seconds within which every call ends, whatever the server
            does (drip, silence): fail-over, `/usage` and retries included
            (default 60; `None` for none).
        max_keys_per_call: the most keys one call tries before it gives up
            (default 3).
        breaker_threshold: upstream failures in a row (5xx, timeouts, no
            connection) after which the whole router pauses for
            `cooldown_minutes` (default 6).
        base_urls: the other providers' addresses by name (`{"exa": ...}`); their
            `*_BASE_URL` variables override the defaults (`base_url` stays Tavily's).
        overflow: let a provider whose keys are all at their rate pass the call to
            the next provider with room at once, instead of waiting (`max_wait`).

    `keys` may map providers to their keys, in chain order:
    `Router({"tavily": [...], "exa": [...], "searxng": ["http://127.0.0.1:8888"]})`.
    A call then moves down the chain only as `searchfuse.router._chain` says: never
    on a rate limit under `on_429="stop"`, after the retries under `"retry"`, past
    a provider no key of which can serve; each result's `searchfuse.degraded` says
    which provider was passed over and why.
        budgets: [`Budget`][searchfuse.Budget]s kept in the store (default: those
            `SEARCHFUSE_BUDGETS` names), checked and counted with each grant (see `spend_scope`);
            over one, a call raises [`BudgetExhausted`][searchfuse.errors.BudgetExhausted] unsent.
        prices: USD per unit by provider (`{"tavily": 0.0075}`), over the list
            prices, for budgets in `usd` (`keys[].price` wins for its key).
    """

    def __init__(
        self,
        keys: Sequence[str | KeyEntry] | Mapping[str, Sequence[Any]] | Config,
        *,
        state: Store | str | os.PathLike[str] | None = None,
        base_url: str | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        on_429: On429 = "stop",
        cooldown_minutes: float | None = None,
        timeout: httpx.Timeout | float | None = None,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        fallback: Callable[..., Any] | None = None,
        pace: bool = True,
        max_wait: float = DEFAULT_MAX_WAIT,
        deadline: float | None = DEFAULT_DEADLINE,
        max_keys_per_call: int = DEFAULT_MAX_KEYS_PER_CALL,
        breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD,
        base_urls: Mapping[str, str] | None = None,
        overflow: bool = False,
        budgets: Sequence[Budget] | None = None,
        prices: Mapping[str, float] | None = None,
    ) -> None:
        environ: Mapping[str, str] = self.__dict__.pop("_environ", os.environ)
        missing: str | None = self.__dict__.pop("_missing", None)
        options = RouterOptions.check(
            on_429=on_429,
            timeout=timeout,
            sync_interval=sync_interval,
            pace=pace,
            max_wait=max_wait,
            deadline=deadline,
            max_keys_per_call=max_keys_per_call,
            breaker_threshold=breaker_threshold,
            clock=clock,
            sleep=sleep,
        )
        spend = Spend(budgets, prices, environ)  # checked before anything is opened
        empty = fallback is not None and not keys
        self.config = Config((), source=missing or "Router(keys=[])") if empty else keys_from(keys)
        minutes = self.config.cooldown_minutes if cooldown_minutes is None else cooldown_minutes
        self.options = options = options.cooled(minutes)
        self._clock = clock
        self._secrets = secrets = KnownKeys(entry.key for entry in self.config.keys)
        urls = dict(base_urls or {})
        transports = (timeout, transport, async_transport)
        wiring = _chainbuild.Wiring(
            environ, base_url, urls, *transports, secrets, self._scrub, breaker_threshold
        )
        store, self._store_closer = open_owned(state, self.config.keys)
        self._chain = _chainbuild.build(self.config, options, store, wiring, fallback, overflow)
        self._core = self._chain.first
        self.http = self._core.http
        self._rpm = {fp: r.requests for c in self._chain.cores for fp, r in c.ledger.rates.items()}
        for core in self._chain.cores:
            core.spend = spend
        self.fallback = fallback
        _admin.warn_if_degraded(self._core, self.config.source, missing)

    @classmethod
    def _made(cls, keys: Any, environ: Mapping[str, str], missing: str | None, **kw: Any) -> Router:
        router = cls.__new__(cls)
        router.__dict__.update(_environ=environ, _missing=missing)
        router.__init__(keys, **kw)  # type: ignore[misc]
        return router

    @classmethod
    def from_config(
        cls, path: str | os.PathLike[str] = "config/keys.json", **options: Any
    ) -> Router:
        """A router for the keys in `path`; state defaults to `state/searchfuse.db`
        beside the `config/` folder (a `state/quota.json` there is imported
        once). Legacy files are migrated (backup first)."""
        try:
            config = load_config(path, clock=options.get("clock"))
        except ConfigError as exc:
            if options.get("fallback") is None:
                raise
            return cls._made([], os.environ, f"{exc.source} ({exc.problem})", **options)
        if "state" not in options:
            options["state"] = default_state(config.path)
        return cls(config, **options)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Router:
        """A router for the keys in `TAVILY_API_KEYS` or `TAVILY_API_KEY`,
        `TAVILY_API_KEY_2`, ... in `environ` (default `os.environ`), which every
        other setting is read from too. State goes to `SEARCHFUSE_STATE` if set,
        else stays in memory."""
        env = os.environ if environ is None else environ
        if not isinstance(env, Mapping):
            raise TypeError(
                f"environ must be a mapping of names to values (like os.environ), not {env!r}"
            )
        try:
            config = config_from_env(env)
        except ConfigError as exc:
            if options.get("fallback") is None:
                raise
            return cls._made([], env, f"{exc.field} ({exc.problem})", **options)
        if "state" not in options and env.get("SEARCHFUSE_STATE"):
            options["state"] = env["SEARCHFUSE_STATE"]
        return cls._made(config, env, None, **options)

    def __repr__(self) -> str:
        keys = ", ".join(entry.masked for entry in self.config.keys)
        return f"Router([{keys}], state={self.store!r}, base_url={self.http.base_url!r})"

    def _scrub(self, text: str) -> str:
        return redact(text, self._secrets)

    # The options as attributes, as they always were.
    on_429 = property(lambda self: self.options.on_429)
    cooldown_seconds = property(lambda self: self.options.cooldown_seconds)
    sync_interval = property(lambda self: self.options.sync_interval)
    pace = property(lambda self: self.options.pace)
    max_wait = property(lambda self: self.options.max_wait)
    deadline = property(lambda self: self.options.deadline)
    max_keys_per_call = property(lambda self: self.options.max_keys_per_call)

    @property
    def store(self) -> Store:
        """Where this router's state lives (shared with every router that names it)."""
        return self._core.ledger.store

    @property
    def keys(self) -> tuple[KeyEntry, ...]:
        """The configured keys (`repr` masks them)."""
        return self.config.keys

    def now(self) -> float:
        """The router's clock (ValueError if it reports no usable time)."""
        return self.options.now()

    def _deadline(self, at_least: float | None = None) -> float | None:
        return _deadline.deadline_after(self.options.deadline, at_least)

    def search(self, query: str, *, max_results: int = 5, **params: Any) -> dict[str, Any]:
        """Search with the best available key; Tavily's JSON as a dict (see the class)."""
        body = self._chain.check("/search", {"query": query, "max_results": max_results, **params})
        deadline = self._deadline()
        with _telemetry.search_span() as span:
            flow = self._chain.flow("/search", body, None, deadline)
            result = drive(self._core, flow, None, deadline)
            span.served(result)
        return result

    async def asearch(self, query: str, *, max_results: int = 5, **params: Any) -> dict[str, Any]:
        """Async twin of [`search`][searchfuse.Router.search]."""
        body = self._chain.check("/search", {"query": query, "max_results": max_results, **params})
        deadline = self._deadline()
        flow = self._chain.flow("/search", body, None, deadline)
        with _telemetry.search_span() as span:
            result = await adrive(self._core, flow, None, deadline)
            span.served(result)
        return result

    def request(
        self, endpoint: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """`POST` `body` to one of Tavily's `ENDPOINTS` and return its JSON (see the class)."""
        check_timeout(timeout)
        sent = self._chain.check(endpoint, body)
        deadline = self._deadline(timeout)
        flow = self._chain.flow(endpoint, sent, timeout, deadline)
        with _telemetry.search_span(endpoint.strip("/")) as span:
            result = drive(self._core, flow, None, deadline)
            span.served(result)
        return result

    async def arequest(
        self, endpoint: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Async twin of [`request`][searchfuse.Router.request]."""
        check_timeout(timeout)
        sent = self._chain.check(endpoint, body)
        deadline = self._deadline(timeout)
        flow = self._chain.flow(endpoint, sent, timeout, deadline)
        with _telemetry.search_span(endpoint.strip("/")) as span:
            result = await adrive(self._core, flow, None, deadline)
            span.served(result)
        return result

    def call(self, fn: Callable[[str], T]) -> T:
        """Run `fn(key)` with the key the router chooses, and learn from its outcome."""
        deadline = self._deadline()
        return drive(self._core, call_flow(self._core, deadline), fn, deadline)  # type: ignore[no-any-return]

    async def acall(self, fn: Callable[[str], Awaitable[T]]) -> T:
        """Async twin of [`call`][searchfuse.Router.call]."""
        deadline = self._deadline()
        return await adrive(self._core, call_flow(self._core, deadline), fn, deadline)

    def ensure_available(self) -> None:
        """Raise if neither a key nor the fallback can serve right now; nothing is sent.

        [`CooldownActive`][searchfuse.errors.CooldownActive] while the router-wide hold
        runs, [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable] when every key is
        cooling, exhausted or disabled (and no fallback function can stand in)."""
        _chainview.ensure_available(self._chain.cores)

    def status(self) -> list[KeyStatus]:
        """One record per key: masked key, account, usage, remaining, cooldown, last error."""
        return _chainview.status(self._chain.cores)

    def hold(self) -> Hold | None:
        """The router-wide hold after a 429 (time left, the masked key that set it), or `None`."""
        return _chainview.hold(self._chain.cores)

    def events(self, limit: int = 50) -> list[Event]:
        """The newest `limit` events of the store's log, newest first: 429s, cooldowns set
        and cleared, holds, moves down the chain and back, budget refusals, from every
        process sharing the store (keys masked; `Event.to_dict()` is the JSON form)."""
        return _chainview.events(self._chain.cores, limit)

    def test_keys(self, spend: bool = False) -> list[ProbeResult]:
        """Check every key with its provider's free probe, one at a time (Tavily `/usage`,
        SearXNG `/healthz`), and refresh the state; keys whose probe budget is used up
        are skipped. A provider without a free probe is noted "not probed: a probe
        costs a search", unless `spend=True` (then a one-result search per key)."""
        return drive(self._core, _chainview.probe_flow(self._chain.cores, spend))

    async def atest_keys(self, spend: bool = False) -> list[ProbeResult]:
        """Async twin of [`test_keys`][searchfuse.Router.test_keys] (still one key at a time)."""
        return await adrive(self._core, _chainview.probe_flow(self._chain.cores, spend))

    def diagnose(self, probe: bool = False) -> Diagnosis:
        """Explain, in verification order (state, cooldown, quota, probe, verdict), whether
        and why the keys can serve; `probe=True` asks each key's `/usage` first."""
        return drive(self._core, _chainview.diagnose_flow(self._chain.cores, probe))

    async def adiagnose(self, probe: bool = False) -> Diagnosis:
        """Async twin of [`diagnose`][searchfuse.Router.diagnose] (still one key at a time)."""
        return await adrive(self._core, _chainview.diagnose_flow(self._chain.cores, probe))

    def shared_cache(
        self, *, ttl: float = 900.0, maxsize: int = 256
    ) -> MutableMapping[Hashable, Any]:
        """A TTL cache in this router's store for its providers, addresses and keys, seen by
        every process sharing the store; `guard(router=router, cache="shared")` uses it."""
        where = [(c.provider.name, c.http.base_url, c.ledger.keys) for c in self._chain.cores]
        return self._core.ledger.shared_cache(ttl=ttl, maxsize=maxsize, scope=cache_scope(where))

    def reset_month(self) -> None:
        """Forget all local state: cooldowns, usage figures, counters."""
        self._core.ledger.clear()

    def close(self) -> None:
        """Close the HTTP connection pools, and the store if this router opened it."""
        for core in self._chain.cores:
            core.http.close()
        self._store_closer.close()

    async def aclose(self) -> None:
        """Close every HTTP connection pool, sync and async, and the store as `close` does."""
        for core in self._chain.cores:
            await core.http.aclose()
        await self._store_closer.aclose()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Router:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
