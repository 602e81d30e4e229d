"""The kernel both the guard and the router run on: steps by type, two conventions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

from searchfuse._sansio import Carried, Flow, Step, arun, carried, run


@dataclass(frozen=True)
class Ask(Step):
    what: str


@dataclass(frozen=True)
class Fail(Step):
    error: BaseException


def conversation(log: list[str]) -> Flow[str]:
    a = yield Ask("first")
    b = yield Ask("second")
    log.append("done")
    return f"{a}+{b}"


def answer(step: Ask) -> str:
    return step.what.upper()


async def aanswer(step: Ask) -> str:
    await asyncio.sleep(0)
    return step.what.upper()


def raise_it(step: Fail) -> None:
    raise step.error


async def araise_it(step: Fail) -> None:
    raise step.error


def test_run_sends_each_outcome_back_and_returns_the_flows_value() -> None:
    log: list[str] = []
    assert run(conversation(log), {Ask: answer}) == "FIRST+SECOND"
    assert log == ["done"]


async def test_arun_is_the_same_on_an_event_loop() -> None:
    log: list[str] = []
    assert await arun(conversation(log), {Ask: aanswer}) == "FIRST+SECOND"
    assert log == ["done"]


def catching() -> Generator[Step, Any, str]:
    try:
        yield Fail(ValueError("backend said no"))
    except ValueError as exc:
        return f"caught {exc}"
    return "not reached"


def test_throw_mode_raises_a_handlers_error_inside_the_flow() -> None:
    assert run(catching(), {Fail: raise_it}, throw=True) == "caught backend said no"


async def test_throw_mode_async() -> None:
    assert await arun(catching(), {Fail: araise_it}, throw=True) == "caught backend said no"


def closing(seen: list[str]) -> Generator[Step, Any, None]:
    try:
        yield Fail(ValueError("boom"))
        seen.append("resumed")
    finally:
        seen.append("closed")


def test_without_throw_a_handlers_error_propagates_and_closes_the_flow() -> None:
    seen: list[str] = []
    with pytest.raises(ValueError, match="boom"):
        run(closing(seen), {Fail: raise_it})
    assert seen == ["closed"]


async def test_without_throw_async_propagates_and_closes() -> None:
    seen: list[str] = []
    with pytest.raises(ValueError, match="boom"):
        await arun(closing(seen), {Fail: araise_it})
    assert seen == ["closed"]


def passing_on() -> Generator[Step, Any, None]:
    try:
        yield Fail(StopIteration("from the backend"))
    except Carried as exc:
        assert isinstance(carried(exc), StopIteration)
        raise


@pytest.mark.parametrize("flow", [passing_on, lambda: (yield Fail(StopIteration("bare")))])
def test_a_stopiteration_comes_out_as_it_was_raised(flow: Any) -> None:
    with pytest.raises(StopIteration):
        run(flow(), {Fail: raise_it}, throw=True)


async def test_offload_resumes_the_flow_in_a_worker_thread() -> None:
    threads: list[str] = []

    def where() -> Flow[int]:
        threads.append(threading.current_thread().name)
        yield Ask("x")
        threads.append(threading.current_thread().name)
        return 1

    assert await arun(where(), {Ask: aanswer}, offload=True) == 1
    main = threading.current_thread().name
    assert threads and all(name != main for name in threads)


def test_an_unknown_step_is_a_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match="Ask"):
        run(conversation([]), {Fail: raise_it})
