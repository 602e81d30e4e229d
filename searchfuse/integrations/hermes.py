"""Hermes: a plugin that keeps a Hermes agent's `web_search` within its budget.

`pip install ".[hermes]"` installs the plugin (entry point group
`hermes_agent.plugins`, name `searchfuse`). Enable it the Hermes way, in
`~/.hermes/config.yaml`:

```yaml
plugins:
  enabled: [searchfuse]
web:
  search_backend: searchfuse
```

It registers two things:

- a `pre_tool_call` hook. One model reply (one `api_request_id`) is one
  turn: its `web_search` calls get `per_turn` searches, the rest are
  blocked with a message telling the model to use the result it gets or to
  combine queries. While a cooldown runs after a 429 every search is blocked
  with the seconds left. Hermes runs this hook for every call of a reply on
  one thread before any of them executes, so the decision is made for the
  whole batch; the hook never raises (Hermes would ignore it and allow the
  call).
- a web search provider, `searchfuse`, that serves Tavily searches through
  a [`Router`][searchfuse.Router] (several keys, usage-aware selection, the
  cache, a hard stop on a 429), so every path into `web_search` (the
  model's tool calls, delegated agents, scripts calling `web_search_tool`)
  goes through the guard.

Scripts that use Hermes' tools without the plugin system call
[`install`][searchfuse.integrations.hermes.install] instead. Keys come from
`$HERMES_HOME/searchfuse/config/keys.json` or from `TAVILY_API_KEYS` (in the environment or
`$HERMES_HOME/.env`); see
[`router_from_hermes`][searchfuse.integrations.hermes.router_from_hermes].
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

try:
    from agent.web_search_provider import (  # type: ignore[import-untyped]  # Hermes has no types
        WebSearchProvider,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'searchfuse.integrations.hermes needs Hermes: pip install ".[hermes]"'
    ) from exc

from searchfuse import _clock
from searchfuse._spend import conversation_scope
from searchfuse.errors import ConfigError, SearchFailed, SearchRefused
from searchfuse.guard import Call, Fuse, Guard, RouterLike, TurnBudget, search_key, turn
from searchfuse.guard.cache import CacheKey
from searchfuse.guard.fuse import DEFAULT_COOLDOWN
from searchfuse.integrations._search_tools import unforeseen

if TYPE_CHECKING:
    from searchfuse.router import Router

__all__ = [
    "PROVIDER_NAME",
    "SearchFusePlugin",
    "SearchFuseProvider",
    "active_plugin",
    "install",
    "register",
    "router_from_hermes",
    "session_conversation",
]

logger = logging.getLogger("searchfuse.integrations.hermes")

#: The provider name to put in `web.search_backend`.
PROVIDER_NAME = "searchfuse"
#: Tavily returns at most this many results per search (Hermes allows up to 100).
MAX_RESULTS = 20
#: An admission the hook granted and no search used is forgotten after this long.
ADMISSION_TTL = 300.0
#: Model replies the hook remembers (the oldest are forgotten first).
REMEMBERED_TURNS = 1024


def _limit(value: Any) -> int:
    """`limit` as Hermes' `web_search_tool` reads it, capped at Tavily's maximum."""
    try:
        limit = int(value)
    except (TypeError, ValueError):
        limit = 5
    return min(max(limit, 1), MAX_RESULTS)


def _hermes_results(data: Any) -> dict[str, Any]:
    """Tavily's JSON in the shape Hermes' `web_search` returns."""
    results = data.get("results") if isinstance(data, dict) else None
    web = [
        {
            "title": item.get("title", ""),
            "url": item.get("url", ""),
            "description": item.get("content", ""),
            "position": position,
        }
        for position, item in enumerate(results or [], start=1)
        if isinstance(item, dict)
    ]
    return {"success": True, "data": {"web": web}}


class _Admission(NamedTuple):
    """A search the hook let through, waiting for the provider to run it."""

    reply: str | None
    session: str | None
    expires: float


def session_conversation(session_id: str | None) -> str | None:
    """The conversation budgets count a Hermes search against: `hermes:<session_id>`."""
    return f"hermes:{session_id}" if session_id else None


def _failure(text: str) -> dict[str, Any]:
    return {"success": False, "error": text}


def _interrupted() -> bool:
    try:
        from tools.interrupt import is_interrupted  # type: ignore[import-untyped]
    except ImportError:
        return False
    return bool(is_interrupted())


# -- configuration from ~/.hermes --------------------------------------------------


def _hermes_home() -> Path:
    from hermes_constants import get_hermes_home  # type: ignore[import-untyped]

    return Path(get_hermes_home())


def _hermes_settings() -> dict[str, Any]:
    """The `searchfuse:` section of Hermes' `config.yaml` (empty if absent)."""
    try:
        from hermes_cli.config import load_config  # type: ignore[import-untyped]

        section = load_config().get("searchfuse")
    except Exception:  # a broken config must not break the plugin's registration
        logger.warning("could not read the searchfuse section of Hermes' config.yaml")
        return {}
    return dict(section) if isinstance(section, dict) else {}


def _hermes_environ() -> dict[str, str]:
    """`os.environ` over `$HERMES_HOME/.env`: how Hermes itself resolves a variable."""
    environ: dict[str, str] = {}
    try:
        from hermes_cli.config import load_env

        environ.update({str(k): str(v) for k, v in (load_env() or {}).items() if v is not None})
    except Exception:  # no .env, or a stripped Hermes: the process environment alone
        pass
    environ.update(os.environ)
    return environ


def router_from_hermes(**options: Any) -> Router:
    """The router the plugin uses, configured from `$HERMES_HOME` (`~/.hermes`).

    Keys come from the first of:

    1. `searchfuse.keys_file` in `config.yaml` (`~` expanded, relative
       paths under `$HERMES_HOME`);
    2. `$HERMES_HOME/searchfuse/config/keys.json`;
    3. `TAVILY_API_KEYS` (or `TAVILY_API_KEY`, `TAVILY_API_KEY_2`...)
       from the environment or `$HERMES_HOME/.env`.

    A keys file keeps its state beside its `config/` folder; keys from the
    environment keep theirs in `$HERMES_HOME/searchfuse/state/quota.json`
    (or `SEARCHFUSE_STATE`). `TAVILY_BASE_URL` is honoured from either
    place. `options` go to the [`Router`][searchfuse.Router] constructor.
    Raises [`ConfigError`][searchfuse.errors.ConfigError] when no key is configured.
    """
    from searchfuse.router import Router

    home = _hermes_home()
    settings = _hermes_settings()
    environ = _hermes_environ()
    if "base_url" not in options and environ.get("TAVILY_BASE_URL"):
        options["base_url"] = environ["TAVILY_BASE_URL"]
    configured = settings.get("keys_file")
    keys_file = home / "searchfuse" / "config" / "keys.json"
    if configured:
        keys_file = Path(os.path.expanduser(str(configured)))
        if not keys_file.is_absolute():
            keys_file = home / keys_file
    if configured or keys_file.exists():
        return Router.from_config(keys_file, **options)
    if "state" not in options:
        options["state"] = environ.get("SEARCHFUSE_STATE")
        if not options["state"]:
            # The plugin's default state folder, the one it makes itself.
            (home / "searchfuse" / "state").mkdir(mode=0o700, parents=True, exist_ok=True)
            options["state"] = home / "searchfuse" / "state" / "quota.json"
    return Router.from_env(environ, **options)


# -- the provider ----------------------------------------------------------------------


class SearchFuseProvider(WebSearchProvider):  # type: ignore[misc]  # Hermes' base class is untyped
    """The Hermes web search provider that serves `web_search` through the plugin.

    Select it with `web.search_backend: searchfuse`. `search()` returns
    Hermes' shape (`{"success": True, "data": {"web": [...]}}`) or, for a
    refusal, `{"success": False, "error": <message for the model>}`. It
    only searches; `web_extract` stays with the extract backend (unless it
    stands in for another provider, see [`install`][searchfuse.integrations.hermes.install], whose
    extract it then forwards).
    """

    def __init__(
        self, plugin: SearchFusePlugin, name: str = PROVIDER_NAME, *, forward: Any = None
    ) -> None:
        self._plugin = plugin
        self._name = name
        self._forward = forward

    @property
    def name(self) -> str:
        """The name `web.search_backend` selects."""
        return self._name

    @property
    def display_name(self) -> str:
        """How `hermes tools` shows it."""
        return "searchfuse (Tavily, several keys)"

    def is_available(self) -> bool:
        """Whether keys are configured (reads local files only, never the network)."""
        return self._plugin.available()

    def supports_search(self) -> bool:
        """It searches."""
        return True

    def supports_extract(self) -> bool:
        """Only when standing in for a provider that extracts."""
        return bool(self._forward is not None and self._forward.supports_extract())

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        """One search through the plugin's guard and router, in Hermes' result shape."""
        return self._plugin.search(query, limit)

    def extract(self, urls: list[str], **kwargs: Any) -> Any:
        """Forwarded to the provider this one stands in for."""
        if self._forward is None:
            raise NotImplementedError(f"{self._name} does not extract")
        return self._forward.extract(urls, **kwargs)

    def get_setup_schema(self) -> dict[str, Any]:
        """What `hermes tools` shows to set it up."""
        return {
            "name": "searchfuse (Tavily, several keys)",
            "badge": "paid",
            "tag": "Tavily over several keys, one search per reply, a hard stop on 429.",
            "env_vars": [
                {
                    "key": "TAVILY_API_KEYS",
                    "prompt": "Tavily API keys, comma-separated",
                    "url": "https://app.tavily.com/home",
                }
            ],
        }


# -- the plugin --------------------------------------------------------------------------


class SearchFusePlugin:
    """The searchfuse plugin for Hermes: the per-reply hook and the routed provider.

    Hermes makes one from its config when it loads the `searchfuse` entry
    point; make your own to choose the options, and hand it to
    [`install`][searchfuse.integrations.hermes.install] (or call
    [`register`][searchfuse.integrations.hermes.SearchFusePlugin.register] from your own plugin):

    ```python
    plugin = SearchFusePlugin(router=Router.from_config("config/keys.json"), per_turn=1)
    install(plugin)
    ```

    The hook and the provider share one [`Guard`][searchfuse.Guard] (one
    budget, one fuse, one cache), so the hook's decision, the cache, the fuse
    and the router agree. Everything here is
    thread-safe: Hermes runs the calls of one reply in parallel threads.

    Args:
        router: What serves the searches; by default
            [`router_from_hermes`][searchfuse.integrations.hermes.router_from_hermes], built on
            first use.
        per_turn: Searches per model reply (`None`: unlimited).
        cache: `True` (15-minute TTL cache, 256 entries), `False`, or a
            cache instance. A cached search is free and served during a cooldown.
        cache_key: `(query, limit=...) -> key`.
        cooldown: Seconds to refuse after a 429 without a usable Retry-After.
        tools: The tool names the hook guards.
        budget: A [`TurnBudget`][searchfuse.TurnBudget] to share.
        fuse: A [`Fuse`][searchfuse.Fuse] to share.
        clock: Zero-argument callable returning epoch seconds.
    """

    def __init__(
        self,
        *,
        router: RouterLike | None = None,
        per_turn: int | None = 1,
        cache: bool | MutableMapping[Any, Any] = True,
        cache_key: CacheKey = search_key,
        cooldown: float = DEFAULT_COOLDOWN,
        tools: Iterable[str] = ("web_search",),
        budget: TurnBudget | None = None,
        fuse: Fuse | None = None,
        clock: _clock.Clock | None = None,
    ) -> None:
        self.per_turn = per_turn
        self.cooldown = float(cooldown)
        self.tools = frozenset(tools)
        self.budget = budget if budget is not None else TurnBudget()
        self.fuse = fuse if fuse is not None else Fuse()
        self.clock = clock
        self.provider = SearchFuseProvider(self)
        self._options: dict[str, Any] = {
            "name": "web_search",
            "per_turn": per_turn,
            "cache": cache,
            "cache_key": cache_key,
            "cooldown": cooldown,
            "adapt": _hermes_results,
            "budget": self.budget,
            "fuse": self.fuse,
            "clock": clock,
        }
        Guard(**{**self._options, "cache": False})  # bad options fail here, not at first use
        self._router = router
        self._router_error: str | None = None
        self._guard: Guard | None = None
        self._lock = threading.Lock()
        # The searches the hook let through, per model reply, and which reply and
        # session each admitted search belongs to (the provider gets only query and limit).
        self._turns: OrderedDict[str, list[Call]] = OrderedDict()
        self._admissions: OrderedDict[Hashable, deque[_Admission]] = OrderedDict()
        self._hooks: list[tuple[Any, Callable[..., Any]]] = []
        self._replaced: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<SearchFusePlugin per_turn={self.per_turn!r} router={self._router!r}>"

    @classmethod
    def from_hermes_config(cls) -> SearchFusePlugin:
        """A plugin with the options of the `searchfuse:` section of `config.yaml`.

        Recognised: `per_turn` (int, or null for unlimited) and `cooldown`
        (seconds); keys are read on first use
        ([`router_from_hermes`][searchfuse.integrations.hermes.router_from_hermes]).
        """
        settings = _hermes_settings()
        options: dict[str, Any] = {}
        if "per_turn" in settings:
            options["per_turn"] = settings["per_turn"]
        if settings.get("cooldown") is not None:
            options["cooldown"] = float(settings["cooldown"])
        return cls(**options)

    def now(self) -> float:
        """The plugin's clock."""
        clock = self.clock
        return clock() if clock is not None else _clock.now()

    def cooldown_left(self) -> float:
        """Seconds until searches may reach Tavily again (`0.0`: no cooldown)."""
        return self.fuse.remaining(self.now())

    # -- the router --------------------------------------------------------------------

    @property
    def router(self) -> RouterLike | None:
        """The router serving the searches (built on first use), or `None` without keys."""
        with self._lock:
            if self._router is None and self._router_error is None:
                try:
                    self._router = router_from_hermes()
                except ConfigError as exc:
                    self._router_error = str(exc)
                    logger.warning("searchfuse has no Tavily keys: %s", exc)
            return self._router

    def available(self) -> bool:
        """Whether the provider can serve (keys are configured)."""
        return self.router is not None

    @property
    def guard(self) -> Guard:
        """The [`Guard`][searchfuse.Guard] the hook decides with and the provider searches through.

        Built on first use, with the router (none when no key is configured:
        then every search fails with the configuration error, never a request).
        """
        router = self.router
        with self._lock:
            if self._guard is None:
                self._guard = Guard(router=router, **self._options)
            return self._guard

    @property
    def cache(self) -> MutableMapping[Any, Any] | None:
        """The cache the hook and the provider share."""
        return self.guard.cache

    # -- the search (the provider's work) --------------------------------------------------

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        """Search through the guard and the router; Hermes' result shape, never an exception.

        A search the hook admitted runs in the turn of the reply that asked
        for it, and counts against the budgets of its Hermes session (the
        conversation `hermes:<session_id>`); any other search (a script, a
        delegated agent) falls under the guard's implicit burst rule and
        counts against the conversation the caller's `spend_scope` names.
        """
        if _interrupted():
            return _failure("Interrupted")
        call = Call(query, {"limit": _limit(limit)}, "web_search")
        try:
            rules = self.guard
            if rules.router is None:
                raise ConfigError(
                    "searchfuse",
                    None,
                    f"no Tavily keys ({self._router_error})",
                    "put keys in $HERMES_HOME/searchfuse/config/keys.json or set TAVILY_API_KEYS",
                )
            admission = self._take_admission(_admission_key(rules, call))
            reply, session = admission if admission is not None else (None, None)
            scope = turn(id=reply) if reply is not None else contextlib.nullcontext()
            with scope, conversation_scope(session_conversation(session)):
                return dict(rules.run(call))
        except SearchRefused as refusal:
            return _failure(refusal.message)
        except (SearchFailed, ConfigError) as exc:
            return _failure(str(exc))
        except Exception as exc:  # Hermes expects a result, not an exception
            return _failure(unforeseen(exc, tool="web_search", router=self._router))

    # -- the hook ------------------------------------------------------------------------

    def pre_tool_call(self, **kwargs: Any) -> dict[str, str] | None:
        """Hermes' `pre_tool_call` hook: `{"action": "block", "message": ...}` or `None`.

        Never raises: a hook that raises is ignored by Hermes, which would
        let the call through unexamined. On an internal error the call is
        allowed (the provider still applies the cache, the fuse and the
        router) and the error is logged.
        """
        try:
            refusal = self.decide(**kwargs)
        except Exception:
            logger.exception("searchfuse pre_tool_call hook failed; the call is allowed")
            return None
        if refusal is None:
            return None
        logger.info("blocked %s (%s)", kwargs.get("tool_name"), refusal.reason)
        return {"action": "block", "message": refusal.message}

    def decide(
        self,
        *,
        tool_name: str = "",
        args: Any = None,
        api_request_id: str = "",
        turn_id: str = "",
        session_id: str = "",
        **_: Any,
    ) -> SearchRefused | None:
        """The refusal for one tool call, or `None` to let it run.

        One model reply (`api_request_id`, else `turn_id`) gets
        `per_turn` distinct uncached searches; cache hits and repeats of
        an admitted query are free. While a cooldown runs, or when no key
        can serve, every uncached search is refused. The search admitted
        counts against the budgets of `session_id`'s conversation.
        """
        if tool_name not in self.tools:
            return None
        arguments = args if isinstance(args, dict) else {}
        query = arguments.get("query")
        if not isinstance(query, str):
            return None  # Hermes answers the malformed call itself
        call = Call(query, {"limit": _limit(arguments.get("limit", 5))}, "web_search")
        reply = str(api_request_id or turn_id or "") or None
        rules = self.guard
        with self._lock:
            # The reply's calls so far plus this one, decided as one batch:
            # repeats and cache hits are free, the first per_turn distinct
            # searches run.
            admitted = self._turns.get(reply, []) if reply is not None else []
            refusal = rules.decide([*admitted, call], turn_id=reply)[-1]
            if refusal is not None:
                return refusal
            if reply is not None:
                if call not in admitted:
                    self._turns.setdefault(reply, []).append(call)
                self._turns.move_to_end(reply)
                while len(self._turns) > REMEMBERED_TURNS:
                    self._turns.popitem(last=False)
            self._admit(_admission_key(rules, call), reply, session_id or None, rules.now())
        return None

    def _admit(self, key: Hashable, reply: str | None, session: str | None, now: float) -> None:
        if reply is None and session is None:
            return
        queue = self._admissions.setdefault(key, deque(maxlen=64))
        queue.append(_Admission(reply, session, now + ADMISSION_TTL))
        self._admissions.move_to_end(key)
        # Admissions another backend served are never taken: keep the table bounded.
        while len(self._admissions) > REMEMBERED_TURNS:
            self._admissions.popitem(last=False)

    def _take_admission(self, key: Hashable) -> tuple[str | None, str | None] | None:
        """The reply and session of the oldest live admission of `key`, or `None`."""
        now = self.now()
        with self._lock:
            queue = self._admissions.get(key)
            while queue:
                admission = queue.popleft()
                if admission.expires > now:
                    if not queue:
                        del self._admissions[key]
                    return admission.reply, admission.session
            self._admissions.pop(key, None)
        return None

    # -- registration ----------------------------------------------------------------------

    def register(self, ctx: Any) -> None:
        """Register the hook and the provider with a Hermes `PluginContext`."""
        ctx.register_hook("pre_tool_call", self.pre_tool_call)
        ctx.register_web_search_provider(self.provider)
        manager = getattr(ctx, "_manager", None)
        self._hooks.append((manager, self.pre_tool_call))

    def serve_as(self, name: str) -> None:
        """Also serve the Hermes backend `name` (`"tavily"`), forwarding its extract.

        Hermes picks `tavily` on its own when `TAVILY_API_KEY` is set;
        standing in for it routes those searches too, without a config change.
        """
        from agent.web_search_registry import (  # type: ignore[import-untyped]
            get_provider,
            register_provider,
        )

        previous = get_provider(name)
        if isinstance(previous, SearchFuseProvider):
            if previous._plugin is self:
                return
            previous = previous._forward  # another plugin's stand-in: take over what it forwards
        self._replaced.setdefault(name, previous)
        register_provider(SearchFuseProvider(self, name, forward=previous))

    def uninstall(self) -> None:
        """Undo [`register`][searchfuse.integrations.hermes.SearchFusePlugin.register],
        [`serve_as`][searchfuse.integrations.hermes.SearchFusePlugin.serve_as] and
        [`install`][searchfuse.integrations.hermes.install] in this process.

        Afterwards [`active_plugin`][searchfuse.integrations.hermes.active_plugin] is `None` (if
        this was the active plugin).
        """
        global _active
        with _active_lock:
            if _active is self:
                _active = None
        for manager, hook in self._hooks:
            hooks = getattr(manager, "_hooks", {}).get("pre_tool_call", [])
            if hook in hooks:
                hooks.remove(hook)
        self._hooks.clear()
        from agent import web_search_registry  # type: ignore[import-untyped]

        replaced, self._replaced = self._replaced, {}
        for name in (PROVIDER_NAME, *replaced):
            registered = web_search_registry.get_provider(name)
            if not isinstance(registered, SearchFuseProvider) or registered._plugin is not self:
                continue
            previous = replaced.get(name)
            if previous is not None:
                web_search_registry.register_provider(previous)
            else:
                # The registry has no public removal; it is a plain dict under a lock.
                with web_search_registry._lock:
                    web_search_registry._providers.pop(name, None)


# -- module-level entry points ---------------------------------------------------------------

_active: SearchFusePlugin | None = None
_active_lock = threading.Lock()


def active_plugin() -> SearchFusePlugin | None:
    """The plugin Hermes (or [`install`][searchfuse.integrations.hermes.install]) registered last in
    this process, if any."""
    return _active


def _active_set(plugin: SearchFusePlugin) -> None:
    global _active
    _active = plugin


def _replace_active(plugin: SearchFusePlugin) -> None:
    """Uninstall the active plugin, if it is another one: one searchfuse plugin at a time."""
    with _active_lock:
        previous = _active
    if previous is not None and previous is not plugin:
        previous.uninstall()


def register(ctx: Any) -> None:
    """Hermes' plugin entry point: register the hook and the provider.

    Hermes calls it when `searchfuse` is in `plugins.enabled`. Each call
    (Hermes re-registers plugins when it reloads them) builds the plugin
    from the current `config.yaml`; a cooldown survives a reload because
    the router keeps it in its state file.
    """
    plugin = SearchFusePlugin.from_hermes_config()
    _replace_active(plugin)
    plugin.register(ctx)
    with _active_lock:
        _active_set(plugin)


def install(
    plugin: SearchFusePlugin | None = None, *, serve_tavily: bool = True
) -> SearchFusePlugin:
    """Route Hermes' `web_search` through searchfuse without the plugin system.

    For scripts that use Hermes' tools (`AIAgent`, `web_search_tool`,
    `handle_function_call`) without enabling plugins in `config.yaml`:

    ```python
    from searchfuse.integrations.hermes import install

    plugin = install()          # keys from ~/.hermes, see router_from_hermes()
    ```

    Runs Hermes' own plugin discovery first (it would otherwise run on the
    first search and put Hermes' bundled providers back over the ones added
    here), then registers `plugin` (default:
    [`SearchFusePlugin.from_hermes_config`][searchfuse.integrations.hermes.SearchFusePlugin.from_hermes_config])
    with Hermes' plugin manager: the `pre_tool_call` hook and the `searchfuse` provider. With
    `serve_tavily` it also stands in for Hermes' `tavily` backend
    (forwarding `web_extract` to it), so the searches Hermes sends to
    Tavily by default go through the router too. Returns the plugin;
    `plugin.uninstall()` undoes it.
    """
    from hermes_cli.plugins import (  # type: ignore[import-untyped]
        PluginContext,
        PluginManifest,
        discover_plugins,
        get_plugin_manager,
    )

    discover_plugins()
    plugin = plugin if plugin is not None else SearchFusePlugin.from_hermes_config()
    # A second install replaces the first: its hook and its providers go.
    _replace_active(plugin)
    manager = get_plugin_manager()
    hooks = getattr(manager, "_hooks", {}).get("pre_tool_call", [])
    if plugin.pre_tool_call not in hooks:
        plugin.register(
            PluginContext(PluginManifest(name="searchfuse", source="entrypoint"), manager)
        )
    if serve_tavily:
        plugin.serve_as("tavily")
    with _active_lock:
        _active_set(plugin)
    return plugin


def _admission_key(rules: Guard, call: Call) -> Hashable:
    """The key an admitted call is found again by: its cache key, or, when the call cannot be
    cached (a failing `cache_key`), its own query and limit."""
    key = rules.key(call)
    if key is None:
        return ("uncacheable", call.query, call.params.get("limit"))
    return key
