"""`guard_tool`: any existing LangChain `BaseTool`, guarded, looking the same to the model."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import ArgsSchema, BaseTool
from pydantic import BaseModel, ConfigDict, PrivateAttr, create_model

from searchfuse import _answers, _clock
from searchfuse._spend import conversation_scope
from searchfuse.errors import BadRequest, SearchFailed, SearchRefused
from searchfuse.guard import Fuse, Guard, RouterLike, TurnBudget, search_key
from searchfuse.guard.cache import CacheKey
from searchfuse.guard.core import DEFAULT_MIN_INTERVAL
from searchfuse.guard.fuse import DEFAULT_COOLDOWN
from searchfuse.integrations.langchain._conversation import config_conversation
from searchfuse.integrations.langchain._reports import (
    GuardParts,
    Reported,
    accept,
    call_of,
    collecting_refusals,
    error_message,
    make_guard,
    message_for,
    shared_result,
)
from searchfuse.integrations.langchain.tavily import RoutedTavilySearch

__all__ = ["GuardedTool", "guard_tool"]


def _schema_without(schema: ArgsSchema | None, field: str) -> ArgsSchema | None:
    """`schema` without the argument `field` (what the model must not see)."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        hidden = dict(schema)
        properties = dict(hidden.get("properties") or {})
        properties.pop(field, None)
        hidden["properties"] = properties
        if "required" in hidden:
            hidden["required"] = [name for name in hidden["required"] if name != field]
        return hidden
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        fields: dict[str, Any] = {
            name: (info.annotation, info)
            for name, info in schema.model_fields.items()
            if name != field
        }
        model: type[BaseModel] = create_model(schema.__name__, __doc__=schema.__doc__, **fields)
        return model
    return schema


def _schema_fields(schema: ArgsSchema | None) -> tuple[str, ...]:
    if isinstance(schema, dict):
        return tuple((schema.get("properties") or {}).keys())
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return tuple(schema.model_fields)
    return ()


class GuardedTool(GuardParts, BaseTool):
    """A `BaseTool` whose calls pass searchfuse's guard; made by `guard_tool`.

    It has the wrapped tool's name, description and argument schema (minus
    an injected key argument), so a model sees the same tool. Every entry
    point (`invoke`, `ainvoke`, `batch`, `abatch`, `run`,
    `arun`) goes through [`run`][searchfuse.integrations.langchain.GuardedTool.run] or
    [`arun`][searchfuse.integrations.langchain.GuardedTool.arun], which guard the call and then run
    the wrapped tool. A refusal is returned, never raised: an error `ToolMessage` for a tool call,
    the refusal's message otherwise.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: The tool being guarded; it still validates and formats its own calls.
    inner: BaseTool

    _guard: Guard = PrivateAttr()
    _inject: str | None = PrivateAttr(default=None)
    _model_fields: tuple[str, ...] = PrivateAttr(default=())

    @classmethod
    def over(cls, tool: BaseTool, rules: Guard, *, inject: str | None = None) -> GuardedTool:
        """`tool` guarded by `rules` (tools may share one [`Guard`][searchfuse.Guard])."""
        schema: ArgsSchema | None = tool.args_schema
        if schema is None:
            schema = tool.get_input_schema()
        if inject is not None:
            if inject not in _schema_fields(schema):
                raise TypeError(
                    f"inject={inject!r}: the tool {tool.name!r} has no argument {inject!r}"
                )
            schema = _schema_without(schema, inject)
        wrapped = cls(
            name=tool.name,
            description=tool.description,
            args_schema=schema,
            return_direct=tool.return_direct,
            response_format=tool.response_format,
            tags=tool.tags,
            metadata=tool.metadata,
            extras=tool.extras,
            inner=tool,
        )
        wrapped._guard = rules
        wrapped._inject = inject
        # What the model sends: the tool-call schema leaves out injected arguments.
        fields = _schema_fields(tool.tool_call_schema) or _schema_fields(schema)
        wrapped._model_fields = tuple(name for name in fields if name != inject)
        return wrapped

    @property
    def tool_call_schema(self) -> ArgsSchema:
        """What the model sees: the wrapped tool's own schema, minus an injected key."""
        if self._inject is None:
            return self.inner.tool_call_schema
        return super().tool_call_schema

    # -- one call --------------------------------------------------------------------

    def _arguments(self, tool_input: str | dict[str, Any]) -> dict[str, Any]:
        """The model-facing arguments of a call: what the cache key and the router see."""
        if isinstance(tool_input, str):
            first = self._model_fields[0] if self._model_fields else "query"
            return {first: tool_input}
        fields = self._model_fields
        # The ToolNode adds injected values (state, runtime, call id) to the
        # arguments; they are not part of the search.
        return {k: v for k, v in tool_input.items() if not fields or k in fields}

    def _inner_input(self, tool_input: str | dict[str, Any], key: str | None) -> Any:
        inject = self._inject
        if inject is None or key is None:
            return tool_input
        base = self._arguments(tool_input) if isinstance(tool_input, str) else dict(tool_input)
        return {**base, inject: key}

    def _routed(self) -> bool:
        # With a router and nothing to inject, the router searches: the tool never runs.
        return self._guard.router is not None and self._inject is None

    def _unsendable(self, query: str) -> BadRequest | None:
        """The router's refusal of a query it never sends, answered before the guard.

        For the router's own searches (and a RoutedTavilySearch's) only: the
        call takes no reservation, so it cannot crowd out the reply's other
        calls while it fails.
        """
        if not (self._routed() or isinstance(self.inner, RoutedTavilySearch)):
            return None
        problem = _answers.query_problem(query)
        return BadRequest(problem, sent=False) if problem is not None else None

    def _slot(self, tool_call_id: str | None) -> str:
        # A tool call gets a ToolMessage back, a plain call the raw value: two cache shapes.
        return self.name if tool_call_id is not None else f"{self.name}:value"

    def _answer(self, outcome: Any, error: Exception | None, tool_call_id: str | None) -> Any:
        """What the caller gets for the guarded call's outcome (or its error)."""
        if isinstance(error, SearchRefused | SearchFailed):
            text = error.message if isinstance(error, SearchRefused) else str(error)
            return error_message(tool_call_id, self.name, text) if tool_call_id else text
        if isinstance(error, Reported):
            if tool_call_id is None:
                return error.result
            return shared_result(error, tool_call_id, self.name)
        if error is not None:
            raise error  # the tool's own error: as it would be without the guard
        if tool_call_id is None:
            return outcome.content if isinstance(outcome, ToolMessage) else outcome
        return message_for(outcome, tool_call_id, self.name)

    def run(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Guard the call, then run the wrapped tool (unless refused or answered from cache)."""

        def backend(key: str | None = None) -> Any:
            with collecting_refusals() as refusals:
                arguments = self._inner_input(tool_input, key)
                result = self.inner.run(arguments, *args, tool_call_id=tool_call_id, **kwargs)
            return accept(result, refusals, tool_call_id)

        call = call_of(self._slot(tool_call_id), self._arguments(tool_input))
        unsendable = self._unsendable(call.query)
        if unsendable is not None:
            return self._answer(None, unsendable, tool_call_id)
        try:
            with conversation_scope(config_conversation(kwargs.get("config"))):
                outcome = self._guard.run(call, None if self._routed() else backend)
        except Exception as exc:
            return self._answer(None, exc, tool_call_id)
        return self._answer(outcome, None, tool_call_id)

    async def arun(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """The same as [`run`][searchfuse.integrations.langchain.GuardedTool.run], on the running
        event loop."""

        async def backend(key: str | None = None) -> Any:
            with collecting_refusals() as refusals:
                arguments = self._inner_input(tool_input, key)
                result = await self.inner.arun(
                    arguments, *args, tool_call_id=tool_call_id, **kwargs
                )
            return accept(result, refusals, tool_call_id)

        call = call_of(self._slot(tool_call_id), self._arguments(tool_input))
        unsendable = self._unsendable(call.query)
        if unsendable is not None:
            return self._answer(None, unsendable, tool_call_id)
        try:
            with conversation_scope(config_conversation(kwargs.get("config"))):
                outcome = await self._guard.arun(call, None if self._routed() else backend)
        except Exception as exc:
            return self._answer(None, exc, tool_call_id)
        return self._answer(outcome, None, tool_call_id)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a GuardedTool runs through run()/arun(), which guard the call")


def guard_tool(
    tool: BaseTool,
    *,
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    cache: bool | str | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cooldown: float = DEFAULT_COOLDOWN,
    router: RouterLike | None = None,
    inject: str | None = None,
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> GuardedTool:
    """Wrap an existing LangChain tool so its calls pass searchfuse's guard.

    ```python
    from searchfuse import turn
    from searchfuse.integrations.langchain import guard_tool

    search = guard_tool(TavilySearch(max_results=3))
    with turn():                                   # one assistant reply
        search.invoke({"query": "python 3.13 release date"})   # searches
        search.invoke({"query": "rust 2024 edition"})          # refused: the message
    ```

    The result keeps the tool's name, description and argument schema.
    Calls through `invoke`, `ainvoke`, `batch`, `abatch`, `run`
    and `arun` are all guarded, in the guard's order: cache, fuse, turn
    budget, backend. A turn is the caller's [`turn`][searchfuse.turn] scope,
    or outside any, calls that overlap or follow within `min_interval`
    seconds (so one `batch` is one turn). A 429 trips the fuse whether the
    tool raises it or reports it in its result. The cache key is the
    model-facing arguments only (never run managers, callbacks or configs).

    Args:
        tool: The tool to guard.
        per_turn: Searches per turn (`None`: unlimited).
        min_interval: Outside any `turn()`, the burst window in seconds.
        cache: `True`, `False`, `"shared"` (with a router) or a cache instance.
        cache_key: `(query, **arguments) -> key`.
        cooldown: Seconds to refuse after a 429 without a usable Retry-After.
        router: Serve calls with this router instead of the tool's backend
            (the tool's arguments are mapped onto `router.search`).
        inject: With `router`: run the tool itself with the key the router
            chose passed as this argument (`"api_key"`), once per key it
            tries. The argument is hidden from the schema the model sees.
        budget: A [`TurnBudget`][searchfuse.TurnBudget] to share.
        fuse: A [`Fuse`][searchfuse.Fuse] to share.
        clock: Zero-argument callable returning epoch seconds.
    """
    rules = make_guard(
        per_turn=per_turn,
        min_interval=min_interval,
        cache=cache,
        cache_key=cache_key,
        cooldown=cooldown,
        router=router,
        inject=inject,
        budget=budget,
        fuse=fuse,
        clock=clock,
    )
    return GuardedTool.over(tool, rules, inject=inject)
