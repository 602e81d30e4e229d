"""The guarded tool looks and binds exactly like the original (that is what wrapt is for)."""

from __future__ import annotations

import inspect

import pytest

from searchfuse.errors import TurnLimitReached
from searchfuse.guard import GuardState, guard, guard_state, turn


def web_search(query: str, max_results: int = 5, *, topic: str = "general") -> dict:
    """Search the web for ``query``."""
    return {"query": query, "max_results": max_results, "topic": topic}


async def aweb_search(query: str, max_results: int = 5) -> dict:
    """Search the web for ``query``, asynchronously."""
    return {"query": query, "max_results": max_results}


@pytest.mark.parametrize("original", [web_search, aweb_search])
def test_signature_name_docstring_and_wrapped_are_kept(original):
    guarded = guard(original)

    assert inspect.signature(guarded) == inspect.signature(original)
    assert guarded.__name__ == original.__name__
    assert guarded.__qualname__ == original.__qualname__
    assert guarded.__doc__ == original.__doc__
    assert guarded.__module__ == original.__module__
    assert guarded.__annotations__ == original.__annotations__
    assert guarded.__wrapped__ is original
    assert inspect.unwrap(guarded) is original


def test_coroutine_functions_stay_coroutine_functions():
    assert inspect.iscoroutinefunction(guard(aweb_search))
    assert not inspect.iscoroutinefunction(guard(web_search))
    assert inspect.iscoroutinefunction(guard(per_turn=2)(aweb_search))


async def test_calling_an_async_tool_gives_a_coroutine():
    pending = guard(aweb_search)("q")
    assert inspect.iscoroutine(pending)
    assert await pending == {"query": "q", "max_results": 5}


def test_all_three_spellings_guard_the_tool():
    bare = guard(web_search)
    configured = guard(per_turn=1)(web_search)

    @guard
    def decorated(query: str) -> str:
        return query

    for tool in (bare, configured, decorated):
        with turn():
            tool("a")
            with pytest.raises(TurnLimitReached):
                tool("b")


class Tools:
    """An agent's toolbox, guarded method by method."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[tuple[str, int]] = []

    @guard(cache=False)
    def search(self, query: str, max_results: int = 5) -> dict:
        """Search with this toolbox."""
        self.seen.append((query, max_results))
        return {"tool": self.name, "query": query}

    @guard(cache=False)
    async def asearch(self, query: str) -> dict:
        """Search with this toolbox, asynchronously."""
        return {"tool": self.name, "query": query}

    @classmethod
    @guard(cache=False)
    def class_search(cls, query: str) -> dict:
        """A classmethod with the guard inside."""
        return {"cls": cls.__name__, "query": query}

    @guard(cache=False)
    @classmethod
    def outer_class_search(cls, query: str) -> dict:
        """A classmethod with the guard outside."""
        return {"cls": cls.__name__, "query": query}

    @staticmethod
    @guard(cache=False)
    def static_search(query: str) -> dict:
        """A static method with the guard inside."""
        return {"query": query}

    @guard(cache=False)
    @staticmethod
    def outer_static_search(query: str) -> dict:
        """A static method with the guard outside."""
        return {"query": query}


def test_methods_bind_to_their_instance():
    tools = Tools("tavily")

    with turn():
        assert tools.search("q", max_results=2) == {"tool": "tavily", "query": "q"}
        with pytest.raises(TurnLimitReached):
            tools.search("again")

    assert tools.seen == [("q", 2)]
    assert inspect.signature(tools.search) == inspect.signature(Tools("x").search)
    assert list(inspect.signature(tools.search).parameters) == ["query", "max_results"]
    assert list(inspect.signature(Tools.search).parameters) == ["self", "query", "max_results"]
    assert tools.search.__doc__ == "Search with this toolbox."


def test_a_method_called_through_the_class_binds_self():
    tools = Tools("tavily")
    with turn():
        assert Tools.search(tools, "q") == {"tool": "tavily", "query": "q"}
    assert tools.seen == [("q", 5)]


def test_the_query_is_read_without_self(backend):
    # The checklist sees the query, not the instance, as the first argument.
    seen = []

    class Toolbox:
        @guard(checklist=[lambda query, call: seen.append((query, dict(call.params)))])
        def search(self, query: str, max_results: int = 5) -> str:
            return query

    Toolbox().search("q")
    assert seen == [("q", {"max_results": 5})]


async def test_async_methods_stay_async():
    tools = Tools("tavily")

    assert inspect.iscoroutinefunction(tools.asearch)
    assert inspect.iscoroutinefunction(Tools.asearch)
    async with turn():
        assert await tools.asearch("q") == {"tool": "tavily", "query": "q"}


@pytest.mark.parametrize("name", ["class_search", "outer_class_search"])
def test_classmethods_bind_to_the_class(name):
    method = getattr(Tools, name)
    assert list(inspect.signature(method).parameters) == ["query"]
    with turn():
        assert method("q") == {"cls": "Tools", "query": "q"}
    with turn():
        assert getattr(Tools("x"), name)("r") == {"cls": "Tools", "query": "r"}


@pytest.mark.parametrize("name", ["static_search", "outer_static_search"])
def test_static_methods_take_no_instance(name):
    assert list(inspect.signature(getattr(Tools, name)).parameters) == ["query"]
    with turn():
        assert getattr(Tools, name)("q") == {"query": "q"}
    with turn():
        assert getattr(Tools("x"), name)("r") == {"query": "r"}


def test_an_already_bound_method_can_be_guarded():
    tools = Tools("bound")
    guarded = guard(tools.search.__wrapped__.__get__(tools), cache=False)

    with turn():
        assert guarded("q") == {"tool": "bound", "query": "q"}
    assert list(inspect.signature(guarded).parameters) == ["query", "max_results"]


def test_guard_state_is_reachable_from_a_bound_method():
    tools = Tools("tavily")
    with turn():
        tools.search("q")
        assert isinstance(tools.search.guard_state(), GuardState)
        assert tools.search.guard_state().turn_searches == 1
        assert guard_state(tools.search).turn_searches == 1


def test_an_async_callable_object_is_guarded_as_async():
    class SearchTool:
        async def __call__(self, query: str) -> str:
            return query

    tool = guard(SearchTool())
    pending = tool("q")
    assert inspect.iscoroutine(pending)
    pending.close()
