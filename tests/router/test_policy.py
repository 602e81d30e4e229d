"""The reaction table's inputs: status classification, Retry-After, clamps, exception codes."""

from __future__ import annotations

from email.utils import formatdate
from typing import ClassVar

import httpx
import pytest

from searchfuse import RateLimited
from searchfuse.router.policy import (
    MAX_PARK,
    MAX_WAIT,
    Outcome,
    clamp_park,
    clamp_wait,
    classify_exception,
    classify_status,
    parse_retry_after,
    retry_after_of,
    status_of,
)

NOW = 1_768_478_400.0


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.OK),
        (400, Outcome.BAD_REQUEST),
        (422, Outcome.BAD_REQUEST),
        (401, Outcome.AUTH),
        (403, Outcome.AUTH),
        (429, Outcome.RATE_LIMITED),
        (432, Outcome.EXHAUSTED),
        (433, Outcome.EXHAUSTED),
        (500, Outcome.UPSTREAM),
        (503, Outcome.UPSTREAM),
        (408, Outcome.UPSTREAM),  # the moment, not the request
        (425, Outcome.UPSTREAM),
        (413, Outcome.BAD_REQUEST),
        (402, Outcome.BAD_REQUEST),
        (None, Outcome.UPSTREAM),
    ],
)
def test_classify_status(status: int | None, outcome: Outcome) -> None:
    assert classify_status(status) is outcome


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("60", 60.0),
        ("0.5", 0.5),
        (" 7 ", 7.0),
        (7, 7.0),
        ("0", 0.0),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("", None),
        (None, None),
        (True, None),
        (formatdate(NOW + 30, usegmt=True), 30.0),
        (formatdate(NOW - 30, usegmt=True), None),
        ("Wed, 99 Foo 2026 99:99:99 GMT", None),
        # What Python reads as a number but no server sends: not believed.
        ("1_0", None),
        ("1e1", None),
        ("+30", None),
        ("\u0663", None),  # an Arabic-Indic 3
        ("3.", None),
        ("0x10", None),
    ],
)
def test_parse_retry_after(value: object, seconds: float | None) -> None:
    result = parse_retry_after(value, NOW)  # type: ignore[arg-type]
    if seconds is None:
        assert result is None
    else:
        assert result == pytest.approx(seconds, abs=1)


def test_clamps_are_separate() -> None:
    assert clamp_park(99999) == MAX_PARK == 3600
    assert clamp_wait(99999) == MAX_WAIT == 10
    assert clamp_wait(60) == 10 and clamp_park(60) == 60
    assert clamp_park(-3) == 0 and clamp_wait(-3) == 0


def _status_error(code: int, retry_after: str | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://api.tavily.com/search")
    headers = {"Retry-After": retry_after} if retry_after else {}
    response = httpx.Response(code, headers=headers, request=request)
    return httpx.HTTPStatusError("error", request=request, response=response)


class WithStatus(Exception):
    status_code = 432


class _Response:
    status_code = 429
    headers: ClassVar[dict[str, str]] = {"retry-after": "12"}


class WithResponse(Exception):
    response = _Response()


def test_status_of_recognises_every_shape() -> None:
    assert status_of(_status_error(429)) == 429
    assert status_of(RateLimited(5)) == 429
    assert status_of(WithStatus()) == 432
    assert status_of(WithResponse()) == 429
    assert status_of(ValueError()) is None


@pytest.mark.parametrize(
    ("code", "status"), [("429", 429), (" 429 ", 429), ("\u0664\u0662\u0669", None), ("4_2", None)]
)
def test_a_status_given_as_text_is_read_in_ascii_digits_only(code: str, status: int | None) -> None:
    class WithTextStatus(Exception):
        status_code = code

    assert status_of(WithTextStatus()) == status


def test_tavily_python_errors_by_class(tmp_path: object) -> None:
    tavily_errors = pytest.importorskip("tavily.errors")
    assert status_of(tavily_errors.UsageLimitExceededError("limit")) == 429
    assert status_of(tavily_errors.InvalidAPIKeyError("bad")) == 401
    assert status_of(tavily_errors.BadRequestError("bad")) == 400
    assert status_of(tavily_errors.ForbiddenError("plan limit exceeded")) == 432
    assert status_of(tavily_errors.ForbiddenError("forbidden")) == 403


def test_retry_after_of_reads_headers_and_attributes() -> None:
    assert retry_after_of(_status_error(429, "9"), NOW) == 9
    assert retry_after_of(WithResponse(), NOW) == 12
    assert retry_after_of(RateLimited(33), NOW) == 33
    assert retry_after_of(ValueError(), NOW) is None


def test_classify_exception() -> None:
    assert classify_exception(httpx.ReadTimeout("t")) is Outcome.UPSTREAM
    assert classify_exception(httpx.ConnectError("c")) is Outcome.UPSTREAM
    assert classify_exception(TimeoutError()) is Outcome.UPSTREAM
    assert classify_exception(_status_error(401)) is Outcome.AUTH
    assert classify_exception(ValueError("bug")) is None
