"""What a guarded call is: its query and its other arguments, by name.

The guard reads a call the way the tool's signature says, so the same rules
(cache key, checklist, delegation to a router) work whatever the tool calls
its parameters: `web_search(query, max_results=5)`,
`web_search_tool(query, limit=5)`, `search(q, count=10)`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["QUERY_NAMES", "Binder", "Call"]

#: Parameter names read as the search query, in order of preference. Without
#: any of them, the first string argument is the query.
QUERY_NAMES = ("query", "q")

_REQUIRED: Any = object()
_SIMPLE_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a guarded tool, as checklist hooks and cache key functions see it.

    `query` is the search query (`""` if the call has none); `params`
    holds every other argument by parameter name, defaults filled in and
    `**kwargs` flattened, without `self`/`cls` and without the argument
    the guard injects (`inject=`); `tool` is the guarded function's
    qualified name.
    """

    query: str
    params: Mapping[str, Any] = field(default_factory=dict)
    tool: str = ""


class Binder:
    """Reads `(args, kwargs)` into a [`Call`][searchfuse.guard.Call] according to one signature.

    Arguments that do not fit the signature raise `TypeError`, as the
    tool itself would. Without a signature (some builtins), the first string
    argument is the query and the others are kept as `arg0`, `arg1`...
    """

    __slots__ = (
        "_covered",
        "_npos",
        "_positional",
        "_query",
        "_required",
        "_signature",
        "_template",
        "tool",
    )

    def __init__(self, signature: inspect.Signature | None, *, tool: str) -> None:
        self.tool = tool
        self._signature = signature
        self._template: dict[str, Any] | None = None
        self._positional: tuple[str, ...] = ()
        self._required: tuple[str, ...] = ()
        # Positional arguments that, once given, leave no required parameter unset.
        self._covered = 0
        self._npos = 0
        self._query: str | None = None
        parameters = list(signature.parameters.values()) if signature is not None else []
        # The common shape (named parameters, no *args/**kwargs/positional-only)
        # is bound by hand: inspect.Signature.bind costs more than all the
        # guard's rules together on a cache hit.
        if signature is not None and all(p.kind in _SIMPLE_KINDS for p in parameters):
            self._template = {
                p.name: _REQUIRED if p.default is inspect.Parameter.empty else p.default
                for p in parameters
            }
            self._positional = tuple(
                p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            )
            self._npos = len(self._positional)
            self._required = tuple(name for name, v in self._template.items() if v is _REQUIRED)
            self._covered = len(self._positional) + 1
            if self._positional[: len(self._required)] == self._required:
                self._covered = len(self._required)
            self._query = next((name for name in QUERY_NAMES if name in self._template), None)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        """The [`Call`][searchfuse.guard.Call] for these arguments."""
        query, params = self.read(args, kwargs)
        return Call(query, params, self.tool)

    def read(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The query and the other arguments by name (no [`Call`][searchfuse.guard.Call] built: the
        hot path)."""
        template = self._template
        if template is not None and not kwargs and self._covered <= len(args) <= self._npos:
            # The commonest call, web_search("query"), in as few steps as possible.
            arguments = template.copy()
            arguments.update(zip(self._positional, args, strict=False))
        else:
            simple = self._bind_simple(args, kwargs)
            arguments = simple if simple is not None else self._bind_general(args, kwargs)
        name = self._query
        if name is not None and isinstance(arguments.get(name), str):
            return arguments.pop(name), arguments
        for name in QUERY_NAMES:
            if isinstance(arguments.get(name), str):
                return arguments.pop(name), arguments
        for name, value in arguments.items():
            if isinstance(value, str):
                del arguments[name]
                return value, arguments
        return "", arguments

    def _bind_simple(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        template = self._template
        if template is None or len(args) > len(self._positional):
            return None
        arguments = template.copy()
        if args:
            arguments.update(zip(self._positional, args, strict=False))
        if kwargs:
            taken = self._positional[: len(args)]
            for name, value in kwargs.items():
                if name not in template or name in taken:
                    return None  # let the general path raise the proper TypeError
                arguments[name] = value
        if len(args) < self._covered:
            for name in self._required:
                if arguments[name] is _REQUIRED:
                    return None
        return arguments

    def _bind_general(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        signature = self._signature
        arguments: dict[str, Any] = {}
        if signature is None:
            for index, value in enumerate(args):
                arguments[f"arg{index}"] = value
            arguments.update(kwargs)
            return arguments
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            else:
                arguments[name] = value
        return arguments
