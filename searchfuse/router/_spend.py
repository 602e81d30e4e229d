"""The router's side of spend control: which budgets a call counts against, for
how much, what the answer really cost, and what the caller is told.

The decision itself (does this call fit, and count it) is the store's, in the
same transaction as the pacing grant (`state/_budgets.py`); this module only
prepares its `Line`s and reads what came back. A budget in `searches` counts
1 per served search; in `credits` the provider's own unit (one per request
where it has none); in `usd` those units times their price
(`providers/_prices.py`), or the dollars the answer states.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from searchfuse._spend import Budget, SpendScope, current_spend
from searchfuse.errors import BudgetExhausted
from searchfuse.providers._prices import check_prices, price_of, stated_usd
from searchfuse.router.config import KeyEntry
from searchfuse.router.state import Grant, State
from searchfuse.router.state._budgets import Line, adjust, period_of, used

__all__ = ["NOTHING", "Line", "Spend", "Spent", "check_budgets", "give_back", "settlement"]

#: Spender ids longer than this are kept as a prefix and a hash.
_MAX_SHOWN = 64


def check_budgets(budgets: Iterable[Budget] | None) -> tuple[Budget, ...]:
    """`Router(budgets=...)`: a list of `Budget`s (a bare one is accepted too)."""
    if budgets is None:
        return ()
    if isinstance(budgets, Budget):
        return (budgets,)
    if isinstance(budgets, str | bytes | Mapping) or not isinstance(budgets, Iterable):
        raise TypeError(
            "budgets must be a list of searchfuse.Budget, such as "
            '[Budget(10, unit="searches", per="conversation")], '
            f"not {type(budgets).__name__}"
        )
    out = tuple(budgets)
    for i, b in enumerate(out):
        if not isinstance(b, Budget):
            raise TypeError(
                f"budgets[{i}] must be a searchfuse.Budget, not {type(b).__name__} "
                '(write Budget(10, unit="searches", per="conversation"))'
            )
    return out


def _spender(text: str) -> str:
    """An id as the store keeps it: short ids as they are, long ones cut and hashed."""
    if len(text) <= _MAX_SHOWN:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[:32]}#{digest}"


@dataclass(frozen=True)
class Spent:
    """What a granted call counts: the lines, each line's unit, and what a unit
    cost on its key (`per_credit`: the provider counts credits, else requests)."""

    lines: tuple[Line, ...]
    units: tuple[str, ...]
    usd_per_unit: float = 0.0
    per_credit: bool = False

    def granted(self, lines: tuple[Line, ...]) -> Spent:
        """This, with the lines as the grant counted them (their use included)."""
        return replace(self, lines=lines)


NOTHING = Spent((), ())


def deltas(spent: Spent, credits: float | None, data: Any = None) -> list[float]:
    """What to add to each line once the answer is in: `credits` is what it cost
    in the provider's unit (`None`: it was not served, all is given back)."""
    if credits is None:
        return [-line.amount for line in spent.lines]
    units = credits if spent.per_credit else 1.0
    dollars = stated_usd(data)
    actual = {
        "searches": 1.0,
        "credits": units,
        "usd": dollars if dollars is not None else units * spent.usd_per_unit,
    }
    return [actual[u] - line.amount for line, u in zip(spent.lines, spent.units, strict=True)]


def give_back(state: State, spent: Spent | None) -> None:
    """Inside a transaction: take back what `spent` counted (the call was not served)."""
    if spent is not None and spent.lines:
        adjust(state, spent.lines, deltas(spent, None))


def settlement(
    spent: Spent | None,
    credits: float,
    data: Any,
    change: Callable[[State], object] | None = None,
) -> tuple[Callable[[State], object] | None, tuple[Line, ...]]:
    """`change` (what the served answer changes of the key), joined with what
    settles `spent` at the answer's real cost; `None` when neither changes
    anything. Also the lines with their settled use."""
    if spent is None or not spent.lines:
        return change, ()
    found = deltas(spent, credits, data)
    settled = tuple(
        replace(line, used=max(0.0, line.used + d))
        for line, d in zip(spent.lines, found, strict=True)
    )
    if not any(found):
        return change, settled

    def both(state: State) -> None:
        if change is not None:
            change(state)
        adjust(state, spent.lines, found)

    return both, settled


class Spend:
    """One router's budgets and prices (see the module docstring)."""

    def __init__(
        self,
        budgets: Iterable[Budget] | None,
        prices: Mapping[str, Any] | None,
    ) -> None:
        self.budgets = check_budgets(budgets)
        self.prices = check_prices(prices)

    @property
    def active(self) -> bool:
        """Whether any budget is set (else nothing is counted)."""
        return bool(self.budgets)

    def _who(self, budget: Budget, scope: SpendScope) -> str | None:
        if budget.per == "router":
            return "*"
        found = scope.conversation if budget.per == "conversation" else scope.user
        return None if found is None else _spender(found)

    def _lines(self, scope: SpendScope, now: float, amounts: Mapping[str, float]) -> list[Line]:
        out = []
        for i, b in enumerate(self.budgets):
            who = self._who(b, scope)
            if who is None:
                continue  # a call outside any scope naming one is not counted here
            label, ends = period_of(b.period, now)
            name = f"{b.per}:{who}:{b.unit}:{b.period or ''}"
            out.append(Line(i, name, label, float(b.limit), amounts[b.unit], ends))
        return out

    def plan(self, provider: str, kind: str, entry: KeyEntry, credits: float, now: float) -> Spent:
        """The lines a `kind` call on `entry` counts against (the running `spend_scope`),
        each with its expected cost."""
        if not self.budgets:
            return NOTHING
        usd, per_credit = price_of(provider, kind, self.prices, entry.price)
        units = credits if per_credit else 1.0
        amounts = {"searches": 1.0, "credits": units, "usd": units * usd}
        lines = tuple(self._lines(current_spend(), now, amounts))
        kinds = tuple(self.budgets[line.index].unit for line in lines)
        return Spent(lines, kinds, usd, per_credit)

    def refusal(self, grant: Grant, now: float) -> BudgetExhausted:
        """What the caller (and its model) is told for a `"budget"` grant."""
        line = grant.over
        assert line is not None
        wait = line.wait(now)
        budget = self.budgets[line.index]
        return BudgetExhausted(budget, line.used, None if math.isinf(wait) else wait)

    def report(self, lines: Sequence[Line]) -> list[dict[str, Any]]:
        """`result["searchfuse"]["budgets"]`: each counted budget's use, this call included."""
        return [_row(self.budgets[line.index], line.used) for line in lines]

    def status(self, state: State, scope: SpendScope, now: float) -> list[dict[str, Any]]:
        """Every budget that applies to `scope`, as the store has it now."""
        zero = dict.fromkeys(("searches", "credits", "usd"), 0.0)
        return [
            _row(self.budgets[line.index], used(state, line.name, line.period))
            for line in self._lines(scope, now, zero)
        ]


def _row(budget: Budget, spent: float) -> dict[str, Any]:
    spent = round(spent, 9)
    return {
        "per": budget.per,
        "unit": budget.unit,
        "period": budget.period,
        "used": spent,
        "limit": budget.limit,
        "left": max(0.0, round(budget.limit - spent, 9)),
    }
