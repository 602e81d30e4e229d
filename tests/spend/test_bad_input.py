"""Bad budgets, prices and spend scopes are refused at construction, naming the argument."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Budget, ConfigError, Router, spend_scope

K1 = "tvly-dev-test0001"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "named"),
    [
        ((-1,), {}, ValueError, "limit=-1"),
        ((math.inf,), {}, ValueError, "limit=inf"),
        ((math.nan,), {}, ValueError, "limit=nan"),
        ((True,), {}, TypeError, "limit=True"),
        (("10",), {}, TypeError, "limit='10'"),
        ((None,), {}, TypeError, "limit=None"),
        ((10**400,), {}, ValueError, "Budget(limit="),
        ((10,), {"unit": None}, ValueError, "unit=None"),
        ((10,), {"per": None}, ValueError, "per=None"),
        ((10,), {"period": ""}, ValueError, "period=''"),
        ((10,), {"unit": "tokens"}, ValueError, "unit='tokens'"),
        ((10,), {"per": "team"}, ValueError, "per='team'"),
        ((10,), {"period": "week"}, ValueError, "period='week'"),
        ((10,), {"period": "Day"}, ValueError, "period='Day'"),
    ],
)
def test_a_bad_budget_names_the_argument_and_the_choices(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error) as refused:
        Budget(*args, **kwargs)
    assert named in str(refused.value)


def test_a_bad_unit_lists_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="'searches' \\| 'credits' \\| 'usd'"):
        Budget(1, unit="searche")  # type: ignore[arg-type]


def test_zero_is_a_budget_that_serves_nothing() -> None:
    assert Budget(0).limit == 0


@pytest.mark.parametrize(
    ("prices", "error", "named"),
    [
        ({"tavily": -0.01}, ValueError, "prices['tavily']"),
        ({"tavily": math.inf}, ValueError, "prices['tavily']"),
        ({"tavily": math.nan}, ValueError, "prices['tavily']"),
        ({"tavily": 10**400}, ValueError, "prices['tavily']"),
        ({"tavily": None}, TypeError, "prices['tavily']"),
        ({"tavily": True}, TypeError, "prices['tavily']"),
        ({"tavily": "0.008"}, TypeError, "prices['tavily']"),
        ({"tavilly": 0.008}, ValueError, "unknown provider 'tavilly'"),
        ([0.008], TypeError, "prices must map provider names"),
    ],
)
def test_a_bad_price_names_the_provider(prices: Any, error: type[Exception], named: str) -> None:
    with pytest.raises(error) as refused:
        Router([K1], prices=prices)
    assert named in str(refused.value)


@pytest.mark.parametrize("budgets", ["10 searches", [10], {"limit": 10}])
def test_budgets_must_be_budget_objects(budgets: Any) -> None:
    with pytest.raises(TypeError, match="Budget"):
        Router([K1], budgets=budgets)


@pytest.mark.parametrize("price", [-1, "cheap", True, None])
def test_a_bad_key_price_in_keys_json_names_the_file_and_field(tmp_path: Path, price: Any) -> None:
    config = tmp_path / "config" / "keys.json"
    config.parent.mkdir()
    item: dict[str, Any] = {"key": K1, "account": "main@example.com", "price": price}
    config.write_text(json.dumps({"format_version": 2, "keys": [item]}))
    if price is None:
        assert Router.from_config(config, state=None).config.keys[0].price is None
        return
    with pytest.raises(ConfigError) as refused:
        Router.from_config(config, state=None)
    text = str(refused.value)
    assert "keys.json" in text and "keys[0].price" in text
    assert K1 not in text


def test_a_key_price_is_kept_by_the_config() -> None:
    from searchfuse.router import KeyEntry

    assert Router([KeyEntry(K1, price=0.005)]).config.keys[0].price == 0.005


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"user": ""}, ValueError),
        ({"conversation": "  "}, ValueError),
        ({"user": True}, TypeError),
        ({"conversation": 4.2}, TypeError),
    ],
)
def test_a_bad_spend_scope_id_is_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    name = next(iter(kwargs))
    with pytest.raises(error, match=f"spend_scope\\({name}="):
        spend_scope(**kwargs)
