"""`searchfuse status --watch`: a live terminal view of a router's keys, hold, budgets and events.

The view is drawn with `rich` (the `watch` extra) from a [`Snapshot`][searchfuse._live.Snapshot]:
per provider and key the state, a used/limit bar, the searches in the current
pacing window, a cooldown countdown and the last error; the hold; the budgets;
the newest events. The store is read every `interval` seconds and the countdowns
tick every second in between. Every text from the keys file, the store or a
server is shown as plain text (no rich markup), with keys masked and control
characters escaped. Ctrl-C or SIGTERM ends it with exit code 0.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from searchfuse._format import duration
from searchfuse._live import Snapshot, Viewer, snapshot, stopped_by_sigterm, viewer_for

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


def _bar(used: float | None, limit: float | None, figures: bool = True) -> Text:
    """`████░░░░ 40/100`: a bar when both figures are known (then the figures only
    with `figures`), else the figures."""
    from rich.text import Text

    shown = f"{_num(used)}/{_num(limit) if limit is not None else '?'}"
    if used is None or limit is None or limit <= 0:
        return Text(shown)
    share = min(1.0, max(0.0, used / limit))
    full = math.ceil(share * _BAR_WIDTH) if used > 0 else 0
    style = "red" if share >= 0.9 else "yellow" if share >= 0.7 else "green"
    bar = Text("█" * full, style=style) + Text("░" * (_BAR_WIDTH - full), style="dim")
    return bar + Text(f" {shown}") if figures else bar


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


#: The order in which keys needing a look come first when not every key fits.
_URGENCY = {"cooling": 0, "exhausted": 1, "disabled": 2, "held": 3, "available": 4}
#: Key rows per provider when the view is not redrawn on a screen (a pipe, a file).
ROWS_PIPED = 50
#: The longest last error a row shows (the whole one is in `searchfuse status`).
_ERROR_SHOWN = 200
#: Columns the last error needs at least, else each key takes two lines.
_ERROR_MIN = 30
_COLUMNS = ("KEY", "STATE", "USED/LIMIT", "WINDOW", "COOLDOWN", "LAST ERROR")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Text]]) -> Any:
    """A table that never cuts a word of its cells (the last column, free text such
    as an error, folds)."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=_text(title, "bold"), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False
    )
    for i, name in enumerate(columns):
        widest = max([len(name), *(len(w) for row in rows for w in row[i].plain.split())])
        if i < len(columns) - 1:
            table.add_column(name, min_width=widest, no_wrap=True)
        else:
            table.add_column(name, overflow="fold", min_width=min(widest, max(len(name), 12)))
    for row in rows:
        table.add_row(*row)
    return table


def _cells(key: dict[str, Any], elapsed: float) -> list[Text]:
    """A key's cells: key, state, used/limit, window, countdown, last error."""
    usage = key.get("key_usage")
    if usage is not None:
        usage += key.get("local_credits") or 0.0
    limit = key.get("key_limit") if key.get("key_limit") is not None else key.get("plan_limit")
    state = str(key.get("state"))
    error = str(key.get("last_error") or "")
    if len(error) > _ERROR_SHOWN:
        error = error[: _ERROR_SHOWN - 1] + "…"
    return [
        _text(key.get("key")),
        _text(state, STATE_STYLES.get(state, "")),
        _bar(usage, limit),
        _window(key),
        _countdown(key, elapsed),
        _text(error),
    ]


def _fits(rows: Sequence[Sequence[Text]], width: int | None) -> bool:
    """Whether the one-line-per-key table fits `width` columns with room for errors."""
    if width is None:
        return True
    widths = [max([len(name), *(r[i].cell_len for r in rows)]) for i, name in enumerate(_COLUMNS)]
    error = min(widths[-1], _ERROR_MIN)
    return sum(widths[:-1]) + error + 2 * len(_COLUMNS) <= width


def _compact(provider: str, rows: Sequence[Sequence[Text]]) -> Any:
    """Each key in two lines (three with an error), for a narrow terminal: the key,
    its state and its countdown first (never cut), then its use and its window,
    then its last error."""
    from rich.console import Group
    from rich.text import Text

    wide = max(r[0].cell_len for r in rows)
    lines: list[Any] = [_text(provider, "bold")]
    for key, state, used, window, countdown, error in rows:
        first = Text(" ") + key + Text(" " * (wide - key.cell_len + 2)) + state
        if countdown.plain != "-":
            first += Text(" " * max(2, 11 - state.cell_len)) + countdown
        lines += [first, Text("    used ") + used + Text(" · window ") + window]
        if error.plain != "-":
            lines.append(Text("    last error: ") + error)
    return Group(*lines)


def _keys_view(
    provider: str,
    keys: Sequence[dict[str, Any]],
    elapsed: float,
    width: int | None = None,
    rows: int | None = None,
) -> Any:
    """The keys of `provider`: a table when it fits `width`, else lines for each key.

    With more keys than `rows`, those needing a look come first (cooling, exhausted,
    disabled, held) and one line counts the others by state."""
    from rich.console import Group

    shown, hidden = list(keys), []
    if rows is not None and len(keys) > rows:
        order = sorted(keys, key=lambda k: _URGENCY.get(str(k.get("state")), 0))
        shown, hidden = order[: max(1, rows)], order[max(1, rows) :]
    cells = [_cells(key, elapsed) for key in shown]
    view = _table(provider, _COLUMNS, cells) if _fits(cells, width) else _compact(provider, cells)
    if not hidden:
        return view
    counts: dict[str, int] = {}
    for key in hidden:
        counts[str(key.get("state"))] = counts.get(str(key.get("state")), 0) + 1
    told = ", ".join(f"{n} {state}" for state, n in counts.items())
    more = f"  … {len(hidden)} more of {len(keys)} keys: {told} (searchfuse status lists all)"
    return Group(view, _text(more, "dim"))


def _hold_line(hold: dict[str, Any] | None, elapsed: float) -> Text:
    left = _left(hold.get("seconds_left"), elapsed) if hold else 0.0
    if hold is None or left <= 0:
        return _text("hold: none (searches may be sent)", "green")
    who = hold.get("key") or "a key"
    provider = f" ({hold['provider']})" if hold.get("provider") else ""
    text = f"hold: every search waits {duration(left)} after a 429 on {who}{provider}"
    return _text(text, "bold magenta")


def _budget_line(budget: dict[str, Any]) -> Text:
    """A budget as `searchfuse status --budgets` says it, after a bar of its use: the
    router's own (`per="router"`), or how many conversations or users spent from it,
    how many used it all, and who most."""
    from rich.text import Text

    used, limit = budget.get("used"), budget.get("limit")
    bar = _bar(used, limit, figures=False) if used is not None else Text(" " * _BAR_WIDTH)
    return Text("  ") + bar + Text(" ") + _text(budget.get("summary") or budget.get("budget"))


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


def render(
    snap: Snapshot,
    elapsed: float = 0.0,
    interval: float | None = None,
    *,
    width: int | None = None,
    rows: int | None = None,
) -> RenderableType:
    """The view of `snap`, its countdowns `elapsed` seconds on.

    Keys are a table when it fits `width` columns, else two lines each; a provider
    with more than `rows` keys shows those needing a look first and counts the rest.
    """
    from rich.console import Group

    when = _clock(str(snap.to_dict()["time"]))
    every = f" · reads the store every {_num(interval)} s" if interval else ""
    parts: list[Any] = [_text(f"searchfuse · {when} UTC{every} · Ctrl-C to quit", "bold")]
    if snap.note:
        parts.append(_text(snap.note, "yellow"))
    if snap.error:
        parts.append(_text(snap.error, "bold red"))
        return Group(*parts)
    parts.append(_hold_line(snap.hold, elapsed))
    providers = list(dict.fromkeys(str(k.get("provider")) for k in snap.keys))
    for provider in providers:
        keys = [k for k in snap.keys if str(k.get("provider")) == provider]
        parts.append(_keys_view(provider, keys, elapsed, width, rows))
    if snap.budgets:
        parts.append(_text("budgets (every process counted):", "bold"))
        parts.extend(_budget_line(b) for b in snap.budgets)
    else:
        parts.append(_text("budgets: none set for this router", "dim"))
    parts.append(_text("last events (newest first, UTC):", "bold"))
    lines = [event_line(e) for e in snap.events[:EVENTS_LISTED]]
    parts.extend(lines or [_text("  none yet", "dim")])
    return Group(*parts)


def watch(
    router: Router | Viewer,
    *,
    interval: float = DEFAULT_INTERVAL,
    console: Console | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rounds: int | None = None,
) -> int:
    """Show the live view of `router` (or of a [`Viewer`][searchfuse._live.Viewer]'s)
    until Ctrl-C (then return 0), or for `rounds` store reads."""
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    tick = min(1.0, interval)
    done = 0
    try:
        if not console.is_terminal:
            # Not a screen to redraw (a pipe, a file): one view per read, one after another.
            while rounds is None or done < rounds:
                snap = _read(router)
                console.print(render(snap, interval=interval, width=console.width, rows=ROWS_PIPED))
                done += 1
                if rounds is None or done < rounds:
                    sleep(interval)
            return 0
        # Never taller than the screen: a view that scrolled cannot be redrawn in place.
        with Live(console=console, auto_refresh=False, vertical_overflow="ellipsis") as live:
            while rounds is None or done < rounds:
                snap, read_at = _read(router), monotonic()
                done += 1
                fit = _Fit(console, snap, interval)
                while True:
                    elapsed = monotonic() - read_at
                    live.update(fit.render(elapsed), refresh=True)
                    wait = min(tick, interval - elapsed)
                    if wait <= 0 or (rounds is not None and done >= rounds):
                        break  # time to read the store again (or the last round is drawn)
                    sleep(wait)
    except KeyboardInterrupt:
        pass
    return 0


def _read(source: Router | Viewer) -> Snapshot:
    return source.snapshot() if isinstance(source, Viewer) else snapshot(source)


class _Fit:
    """The view of one read, with as many key rows as the screen has room for (found
    once per read and again when the terminal is resized)."""

    def __init__(self, console: Console, snap: Snapshot, interval: float) -> None:
        self.console, self.snap, self.interval = console, snap, interval
        self.size: tuple[int, int] | None = None
        self.rows: int | None = None

    def _lines(self, elapsed: float, rows: int | None) -> int:
        view = self.render_with(elapsed, rows)
        return len(self.console.render_lines(view, self.console.options, pad=False))

    def render_with(self, elapsed: float, rows: int | None) -> RenderableType:
        return render(self.snap, elapsed, self.interval, width=self.console.width, rows=rows)

    def render(self, elapsed: float) -> RenderableType:
        size = (self.console.width, self.console.height)
        if size != self.size:
            self.size, self.rows = size, self._room(elapsed)
        return self.render_with(elapsed, self.rows)

    def _room(self, elapsed: float) -> int | None:
        """How many keys per provider fit the screen (`None`: all of them)."""
        height = self.console.height - 1  # the line the cursor waits on
        counts: dict[str, int] = {}
        for key in self.snap.keys:
            counts[str(key.get("provider"))] = counts.get(str(key.get("provider")), 0) + 1
        most = max(counts.values(), default=0)
        if most <= height and self._lines(elapsed, None) <= height:
            return None
        rows = min(most, 1 + max(0, height - self._lines(elapsed, 1)) // len(counts))
        while rows > 1:
            over = self._lines(elapsed, rows) - height
            if over <= 0:
                break
            rows = max(1, rows - max(1, over // (2 * len(counts))))
        return rows


def run(args: argparse.Namespace, make_router: Callable[..., Router]) -> int:
    """`searchfuse status --watch`: build the router and watch it until Ctrl-C or SIGTERM
    (exit code 0 for both)."""
    try:
        import rich  # noqa: F401
    except ImportError:
        raise ImportError(INSTALL) from None
    with stopped_by_sigterm():
        try:
            viewer = viewer_for(args, make_router)
            try:
                return watch(viewer, interval=args.interval, console=_console())
            finally:
                viewer.close()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM before the view was drawn
            return 0


class _PlainText:
    """A text stream that spells searchfuse's own characters (`…`, `·`, bars) in ASCII,
    one for one so that columns stay aligned, for a terminal whose encoding lacks them
    (`tvly-dev-~0001`); everything else is the stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        from searchfuse.cli import _PLAIN

        return int(self._stream.write(text.translate(_PLAIN)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _console() -> Console:
    """The console the view is drawn on: standard output, in ASCII where it must be."""
    import sys

    from rich.console import Console

    from searchfuse.cli import _can_show

    return Console() if _can_show(sys.stdout) else Console(file=_PlainText(sys.stdout))  # type: ignore[arg-type]
