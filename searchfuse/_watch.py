"""`searchfuse status --watch`: a live terminal view of a router's keys, hold, budgets and events.

The view is drawn with `rich` (the `watch` extra) from a [`Snapshot`][searchfuse._live.Snapshot]:
per provider and key the state, a used/limit bar, the searches in the current
pacing window, a cooldown countdown and the last error; the hold; the budgets;
the newest events. The store is read every `interval` seconds and the countdowns
tick every second in between. Every text from the keys file, the store or a
server is shown as plain text (no rich markup), with keys masked and control
characters escaped. Ctrl-C ends it with exit code 0.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from searchfuse._format import duration
from searchfuse._live import Snapshot, snapshot

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text

    from searchfuse.router import Router

__all__ = ["DEFAULT_INTERVAL", "INSTALL", "render", "run", "watch"]

#: Seconds between two reads of the store, unless told otherwise.
DEFAULT_INTERVAL = 2.0
#: How to get what the view needs.
INSTALL = 'the live view needs rich: pip install ".[watch]"'
#: How many of the newest events the view lists.
EVENTS_LISTED = 5
_BAR_WIDTH = 12
#: Colours of a key's state (the dashboard uses the same meanings).
STATE_STYLES = {
    "available": "green",
    "held": "magenta",
    "cooling": "yellow",
    "exhausted": "red",
    "disabled": "red",
}
#: What an event kind reads as, and its colour.
EVENT_LABELS = {
    "rate_limited": ("429", "bold red"),
    "cooldown": ("cooldown", "yellow"),
    "cooldown_cleared": ("cooldown over", "green"),
    "exhausted": ("exhausted", "red"),
    "hold": ("hold", "magenta"),
    "passed_over": ("passed over", "bold yellow"),
    "serves_again": ("serves again", "green"),
    "budget": ("budget refused", "cyan"),
}


def _text(value: Any, style: str = "") -> Text:
    """`value` as plain text for the terminal: no markup, control characters escaped."""
    from rich.text import Text

    from searchfuse.cli import escape_controls

    return Text(escape_controls("-" if value is None or value == "" else str(value)), style=style)


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if value == int(value) else f"{value:.4g}"


def _bar(used: float | None, limit: float | None) -> Text:
    """`[████░░░░] 40/100`: a bar when both figures are known, else the figures."""
    from rich.text import Text

    shown = f"{_num(used)}/{_num(limit) if limit is not None else '?'}"
    if used is None or limit is None or limit <= 0:
        return Text(shown)
    share = min(1.0, max(0.0, used / limit))
    full = math.ceil(share * _BAR_WIDTH) if used > 0 else 0
    style = "red" if share >= 0.9 else "yellow" if share >= 0.7 else "green"
    bar = Text("█" * full, style=style) + Text("░" * (_BAR_WIDTH - full), style="dim")
    return bar + Text(f" {shown}")


def _left(seconds: float | None, elapsed: float) -> float:
    return max(0.0, (seconds or 0.0) - elapsed)


def _countdown(key: dict[str, Any], elapsed: float) -> Text:
    left = _left(key.get("cooldown_left"), elapsed)
    if left <= 0:
        return _text("-")
    why = key.get("cooldown_reason") or key.get("state")
    return _text(f"{duration(left)} ({why})", STATE_STYLES.get(str(key.get("state")), ""))


def _window(key: dict[str, Any]) -> Text:
    sent, limit = key.get("window_requests"), key.get("window_limit")
    seconds = key.get("window_seconds")
    if limit is None:
        return _text("-")
    return _text(f"{_num(sent) if sent is not None else '?'}/{limit} per {per(seconds)}")


def per(seconds: float | None) -> str:
    """A rate's window as people say it: `"s"`, `"min"`, `"h"`, `"day"`, else `"90 s"`."""
    names = {1.0: "s", 60.0: "min", 3600.0: "h", 86400.0: "day"}
    return "?" if seconds is None else names.get(float(seconds), f"{_num(seconds)} s")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Text]]) -> Any:
    """A table that never cuts a word of its cells: in a narrow terminal a cell wraps
    between words, and only the last column (free text, such as an error) folds."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=_text(title, "bold"), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False
    )
    for i, name in enumerate(columns):
        widest = max([len(name), *(len(w) for row in rows for w in row[i].plain.split())])
        if i < len(columns) - 1:
            table.add_column(name, min_width=widest)
        else:
            table.add_column(name, overflow="fold", min_width=min(widest, max(len(name), 12)))
    for row in rows:
        table.add_row(*row)
    return table


def _keys_table(provider: str, keys: Sequence[dict[str, Any]], elapsed: float) -> Any:
    rows = []
    for key in keys:
        usage = key.get("key_usage")
        if usage is not None:
            usage += key.get("local_credits") or 0.0
        limit = key.get("key_limit") if key.get("key_limit") is not None else key.get("plan_limit")
        state = str(key.get("state"))
        rows.append(
            [
                _text(key.get("key")),
                _text(state, STATE_STYLES.get(state, "")),
                _bar(usage, limit),
                _window(key),
                _countdown(key, elapsed),
                _text(key.get("last_error")),
            ]
        )
    columns = ("KEY", "STATE", "USED/LIMIT", "WINDOW", "COOLDOWN", "LAST ERROR")
    return _table(provider, columns, rows)


def _hold_line(hold: dict[str, Any] | None, elapsed: float) -> Text:
    left = _left(hold.get("seconds_left"), elapsed) if hold else 0.0
    if hold is None or left <= 0:
        return _text("hold: none (searches may be sent)", "green")
    who = hold.get("key") or "a key"
    provider = f" ({hold['provider']})" if hold.get("provider") else ""
    text = f"hold: every search waits {duration(left)} after a 429 on {who}{provider}"
    return _text(text, "bold magenta")


def _budgets_table(budgets: Sequence[dict[str, Any]]) -> Any:
    rows = []
    for b in budgets:
        # A budget per conversation or user has a tally for each: its limit applies to each.
        each = b.get("used") is None
        used = _text(f"{_num(b.get('limit'))} each") if each else _bar(b["used"], b.get("limit"))
        left = _text("-" if each else _num(b.get("left")))
        rows.append([_text(b.get("per")), _text(b.get("unit")), _text(b.get("period")), used, left])
    return _table("budgets", ("PER", "UNIT", "PERIOD", "USED/LIMIT", "LEFT"), rows)


def _clock(iso: str) -> str:
    return iso[11:19] if len(iso) >= 19 else iso


def event_line(event: dict[str, Any]) -> Text:
    """One event as a line: time (UTC), what happened, the key and provider, the detail."""
    label, style = EVENT_LABELS.get(str(event.get("kind")), (str(event.get("kind")), ""))
    who = " ".join(str(x) for x in (event.get("key"), event.get("provider")) if x)
    parts = [_text(_clock(str(event.get("time", "")))), _text(f" {label}", style)]
    if who:
        parts.append(_text(f" {who}"))
    if event.get("retry_after"):
        parts.append(_text(f" for {duration(event['retry_after'])}"))
    if event.get("detail"):
        parts.append(_text(f" · {event['detail']}", "dim"))
    out = parts[0]
    for part in parts[1:]:
        out += part
    return out


def render(snap: Snapshot, elapsed: float = 0.0, interval: float | None = None) -> RenderableType:
    """The view of `snap`, its countdowns `elapsed` seconds on."""
    from rich.console import Group

    when = _clock(str(snap.to_dict()["time"]))
    every = f" · reads the store every {_num(interval)} s" if interval else ""
    parts: list[Any] = [_text(f"searchfuse · {when} UTC{every} · Ctrl-C to quit", "bold")]
    if snap.error:
        parts.append(_text(snap.error, "bold red"))
        return Group(*parts)
    parts.append(_hold_line(snap.hold, elapsed))
    providers = list(dict.fromkeys(str(k.get("provider")) for k in snap.keys))
    for provider in providers:
        keys = [k for k in snap.keys if str(k.get("provider")) == provider]
        parts.append(_keys_table(provider, keys, elapsed))
    if snap.budgets:
        parts.append(_budgets_table(snap.budgets))
    else:
        parts.append(_text("budgets: none set for this router", "dim"))
    parts.append(_text("last events (newest first, UTC):", "bold"))
    lines = [event_line(e) for e in snap.events[:EVENTS_LISTED]]
    parts.extend(lines or [_text("  none yet", "dim")])
    return Group(*parts)


def watch(
    router: Router,
    *,
    interval: float = DEFAULT_INTERVAL,
    console: Console | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rounds: int | None = None,
) -> int:
    """Show the live view until Ctrl-C (then return 0), or for `rounds` store reads."""
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    tick = min(1.0, interval)
    done = 0
    try:
        if not console.is_terminal:
            # Not a screen to redraw (a pipe, a file): one view per read, one after another.
            while rounds is None or done < rounds:
                console.print(render(snapshot(router), interval=interval))
                done += 1
                if rounds is None or done < rounds:
                    sleep(interval)
            return 0
        with Live(console=console, auto_refresh=False, vertical_overflow="visible") as live:
            while rounds is None or done < rounds:
                snap, read_at = snapshot(router), monotonic()
                done += 1
                while True:
                    elapsed = monotonic() - read_at
                    live.update(render(snap, elapsed, interval), refresh=True)
                    wait = min(tick, interval - elapsed)
                    if wait <= 0 or (rounds is not None and done >= rounds):
                        break  # time to read the store again (or the last round is drawn)
                    sleep(wait)
    except KeyboardInterrupt:
        pass
    return 0


def run(args: argparse.Namespace, make_router: Callable[..., Router]) -> int:
    """`searchfuse status --watch`: build the router and watch it until Ctrl-C."""
    try:
        import rich  # noqa: F401
    except ImportError:
        raise ImportError(INSTALL) from None
    router = make_router(args)
    try:
        return watch(router, interval=args.interval)
    finally:
        router.close()
