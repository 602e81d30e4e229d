"""What a type checker sees of guarded tools; tests/test_typing.py runs mypy --strict on it."""

from __future__ import annotations

from typing import Any, assert_type

from searchfuse import Guard, GuardState, Router, SearchRefused, guard, guard_state
from searchfuse.guard import GuardOptions, tavily_tool


@guard
def plain(query: str, max_results: int = 5) -> dict[str, Any]:
    return {"query": query, "max_results": max_results}


@guard(per_turn=2, cache=False)
def limited(query: str) -> list[str]:
    return [query]


@guard(on_refusal="return")
def returning(query: str, max_results: int = 5) -> dict[str, Any]:
    return {"query": query}


def as_number(refusal: SearchRefused) -> int:
    return 0


@guard(on_refusal=as_number)
def handled(query: str) -> str:
    return query


@guard(on_refusal="return")
async def async_returning(query: str) -> dict[str, Any]:
    return {"query": query}


@guard
async def async_plain(query: str) -> bytes:
    return query.encode()


class Tools:
    @guard
    def method(self, query: str) -> str:
        return query


def wrapped_form(query: str) -> float:
    return 1.0


existing = guard(wrapped_form, cache=False)
existing_returning = guard(wrapped_form, on_refusal="return")
existing_handled = guard(wrapped_form, on_refusal=as_number)
existing_shaped = guard(wrapped_form, on_refusal=lambda refusal: refusal.message)


async def async_form(query: str) -> float:
    return 1.0


async_handled = guard(async_form, on_refusal=as_number)


def check() -> None:
    assert_type(plain("q"), dict[str, Any])
    assert_type(plain("q", max_results=3), dict[str, Any])
    assert_type(limited("q"), list[str])
    assert_type(returning("q"), dict[str, Any] | str)
    assert_type(handled("q"), str | int)
    assert_type(Tools().method("q"), str)
    assert_type(existing("q"), float)
    assert_type(existing_returning("q"), float | str)
    assert_type(existing_handled("q"), float | int)
    assert_type(existing_shaped("q"), float | str)
    assert_type(existing.guard, Guard)
    assert_type(existing.guard.state(), GuardState)
    assert_type(plain.guard_state(), GuardState)
    assert_type(Tools().method.guard_state(), GuardState)
    assert_type(guard_state(plain), GuardState)
    rules = Guard(per_turn=1)
    assert_type(rules.state(), GuardState)

    router = Router(["tvly-dev-test0001"])
    search = tavily_tool(router, on_refusal="return")
    assert_type(search("q", 3, topic="news"), dict[str, Any] | str)
    strict = tavily_tool(router)
    assert_type(strict("q")["results"], Any)
    assert_type(search.guard_state(), GuardState)


async def acheck() -> None:
    assert_type(await async_returning("q"), dict[str, Any] | str)
    assert_type(await async_plain("q"), bytes)
    assert_type(await async_handled("q"), float | int)


# The options typed once: a dict checked as GuardOptions passes through to guard().

shared: GuardOptions = {"per_turn": 2, "cache": False, "min_interval": 0.5}


@guard(**shared)
def with_options(query: str) -> list[str]:
    return [query]


assert_type(with_options("q"), list[str])


def plain_search(query: str) -> list[str]:
    return [query]


returned_with_options = guard(plain_search, on_refusal="return", **shared)
assert_type(returned_with_options("q"), list[str] | str)
