"""guard(): its options, refusal handling, introspection and the clock it reads."""

from __future__ import annotations

import json

import pytest

from searchfuse.errors import CooldownActive, SearchRefused, TurnLimitReached
from searchfuse.guard import GuardState, guard, guard_state, turn
from searchfuse.testing import testing_mode
from tests.guard.helpers import http_error


def test_on_refusal_raise_is_the_default(backend, clock):
    @guard(clock=clock)
    def web_search(query: str) -> dict:
        return backend.search(query)

    with turn():
        web_search("a")
        with pytest.raises(TurnLimitReached):
            web_search("b")


def test_on_refusal_return_gives_the_model_the_message(backend, clock):
    @guard(clock=clock, on_refusal="return")
    def web_search(query: str) -> dict:
        return backend.search(query)

    with turn():
        web_search("a")
        result = web_search("b")

    assert result == TurnLimitReached(1).message
    assert web_search.guard_state().refusals == 1


def test_on_refusal_callable_shapes_the_result(backend, clock):
    @guard(clock=clock, on_refusal=lambda refusal: json.dumps(refusal.to_dict()))
    def web_search_tool(query: str, limit: int = 5) -> str:
        return json.dumps(backend.search(query))

    with turn():
        web_search_tool("a")
        result = json.loads(web_search_tool("b"))

    assert result["error"] == "turn_limit"
    assert result["retry_after"] is None
    assert result["message"].startswith("Search refused")


async def test_on_refusal_may_be_async_for_an_async_tool(backend, clock):
    async def as_tool_message(refusal: SearchRefused) -> dict:
        return {"status": "error", "content": refusal.message}

    @guard(clock=clock, on_refusal=as_tool_message)
    async def web_search(query: str) -> dict:
        return await backend.asearch(query)

    async with turn():
        await web_search("a")
        result = await web_search("b")

    assert result["status"] == "error"
    assert "already used its 1 web search" in result["content"]


def test_the_refusal_keeps_its_reason_and_retry_after(backend, clock):
    refusals: list[SearchRefused] = []

    @guard(clock=clock, per_turn=None, on_refusal=refusals.append)
    def web_search(query: str) -> dict:
        return backend.search(query)

    backend.fail_next(http_error(429, "7"))
    web_search("a")
    clock.advance(2)
    web_search("b")

    assert [r.reason for r in refusals] == ["rate_limited", "cooldown"]
    assert [r.retry_after for r in refusals] == [7, 5]


def test_adapt_shapes_the_backend_result_before_caching(backend, clock):
    @guard(clock=clock, adapt=json.dumps, per_turn=None)
    def web_search_tool(query: str) -> str:
        return backend.search(query)  # type: ignore[return-value]

    first = web_search_tool("a")
    again = web_search_tool("a")

    assert isinstance(first, str)
    assert json.loads(first)["query"] == "a"
    assert again == first
    assert backend.queries == ["a"]


def test_other_exceptions_propagate_unchanged(backend, clock):
    @guard(clock=clock)
    def web_search(query: str) -> dict:
        return backend.search(query)

    error = ValueError("bad parameter")
    backend.fail_next(error)

    with pytest.raises(ValueError) as raised:
        web_search("a")

    assert raised.value is error
    assert web_search.guard_state().refusals == 0


def test_wrong_arguments_raise_type_error_like_the_tool(backend, clock):
    @guard(clock=clock)
    def web_search(query: str) -> dict:
        return backend.search(query)

    with pytest.raises(TypeError):
        web_search("a", "unexpected")
    with pytest.raises(TypeError):
        web_search(quer="typo")
    assert backend.queries == []


def by_name(query: str, max_results: int = 5) -> None: ...


def short_name(q: str, count: int = 5) -> None: ...


def first_string(text: str, max_results: int = 5) -> None: ...


def later_string(max_results: int, text: str) -> None: ...


@pytest.mark.parametrize(
    ("tool", "args", "kwargs", "expected"),
    [
        (by_name, ("by name",), {}, "by name"),
        (short_name, (), {"q": "short name"}, "short name"),
        (first_string, ("first string",), {}, "first string"),
        (later_string, (3, "a later string"), {}, "a later string"),
    ],
)
def test_the_query_is_found_whatever_it_is_called(tool, args, kwargs, expected):
    seen = []
    guarded = guard(tool, checklist=[lambda query, call: seen.append(query)])

    guarded(*args, **kwargs)

    assert seen == [expected]


def test_every_parameter_shape_is_read(backend, clock):
    seen = []

    def spy(query, call):
        seen.append((query, dict(call.params)))

    @guard(clock=clock, checklist=[spy], per_turn=None)
    def tool(query: str, /, *extra: str, depth: str = "basic", **tavily: object) -> str:
        return query

    tool("q", "x", "y", depth="advanced", topic="news", include_answer=True)
    tool("r")

    assert seen == [
        ("q", {"extra": ("x", "y"), "depth": "advanced", "topic": "news", "include_answer": True}),
        ("r", {"extra": (), "depth": "basic"}),
    ]


def test_a_positional_argument_given_twice_is_a_type_error(backend, clock):
    @guard(clock=clock)
    def web_search(query: str, max_results: int = 5) -> dict:
        return backend.search(query)

    with pytest.raises(TypeError):
        web_search("a", 3, max_results=4)
    with pytest.raises(TypeError):
        web_search()


def test_guard_state_is_a_snapshot_for_status_lines(backend, clock):
    @guard(clock=clock, checklist=[lambda q, call: "known" if q == "k" else None])
    def web_search(query: str) -> dict:
        return backend.search(query)

    with turn(id="reply-1"):
        web_search("a")
        web_search("a")
        web_search("k")
        state = web_search.guard_state()

    assert state == GuardState(
        turn_id="reply-1",
        turn_searches=1,
        per_turn=1,
        fuse_tripped=False,
        cooldown_left=0.0,
        cache_size=1,
        cache_maxsize=256,
        searches=1,
        cache_hits=1,
        checklist_answers=1,
        refusals=0,
    )
    assert str(state) == "searches this turn: 1/1 · fuse: ready · cache: 1/256"
    assert guard_state(web_search) == web_search.guard_state()


def test_guard_state_while_cooling_down(backend, clock):
    @guard(clock=clock)
    def web_search(query: str) -> dict:
        return backend.search(query)

    backend.fail_next(http_error(429, "30"))
    with pytest.raises(SearchRefused):
        web_search("a")
    clock.advance(0.5)

    state = web_search.guard_state()
    assert state.fuse_tripped
    assert state.cooldown_left == 29.5
    assert "fuse: cooling down, 30 s left" in str(state)


def test_guard_state_refuses_an_unguarded_function():
    with pytest.raises(TypeError):
        guard_state(len)


def test_without_clock_the_guard_reads_searchfuse_s_clock_at_call_time(backend):
    @guard  # made before test mode is switched on
    def web_search(query: str) -> dict:
        return backend.search(query)

    with testing_mode() as fake_clock:
        backend.fail_next(http_error(429, "10"))
        with pytest.raises(SearchRefused):
            web_search("a")
        fake_clock.advance(9)
        with pytest.raises(CooldownActive):
            web_search("b")
        fake_clock.advance(1)
        web_search("c")

    assert backend.queries == ["a", "c"]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"per_turn": -1}, ValueError),
        ({"per_turn": 1.5}, ValueError),
        ({"per_turn": True}, ValueError),
        ({"min_interval": -1}, ValueError),
        ({"cooldown": float("inf")}, ValueError),
        ({"on_refusal": "ignore"}, ValueError),
        ({"inject": "api_key"}, ValueError),
        ({"checklist": ["not callable"]}, TypeError),
    ],
)
def test_nonsense_options_are_rejected_at_decoration(options, error):
    with pytest.raises(error):
        guard(**options)


@pytest.mark.parametrize(
    ("option", "value", "accepts"),
    [
        ("cache_key", None, "a callable"),
        ("adapt", "json", "a callable"),
        ("budget", "b", "TurnBudget"),
        ("fuse", "f", "Fuse"),
        ("clock", "c", "callable returning epoch seconds"),
        ("router", "r", "searchfuse.Router"),
        ("inject", 3, "the name of an argument"),
        ("cooldown", True, "a number of seconds"),
        ("min_interval", "2", "a number of seconds"),
    ],
)
def test_an_option_of_the_wrong_kind_fails_at_decoration_naming_it(option, value, accepts):
    def web_search(query: str) -> str:
        return query

    for make in (lambda: guard(web_search, **{option: value}), lambda: guard(**{option: value})):
        with pytest.raises(TypeError) as raised:
            make()
        assert str(raised.value).startswith(f"{option} must be")
        assert accepts in str(raised.value)


def test_a_cache_that_is_not_a_mapping_is_rejected():
    with pytest.raises(TypeError):
        guard(lambda query: query, cache="yes")  # type: ignore[call-overload]
