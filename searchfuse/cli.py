"""`searchfuse`: the command line (status, test-keys, search, reset-month, diagnose, init, demo).

Exit codes: 0 ok, 1 the search failed or was refused (`test-keys`: a key
failed), 2 a usage or config error. A usage error is one line on stderr,
never a traceback. With `--json`, stdout is valid JSON whatever happens
(an error is `{"error": ..., "message": ...}`).

The old `tavily_multi_key.py` forms work as they are: ``search --query Q
--count N`, `status`, `test-keys` and `reset-month``, each with
`--json`.

Keys are never printed: only masked forms and fingerprints.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import os
import shutil
import stat
import sys
import tempfile
import textwrap
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from searchfuse import __version__, _clock, _readonly
from searchfuse._format import ago, duration
from searchfuse._secrets import redact
from searchfuse.errors import (
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    SearchFailed,
    SearchRefused,
    StoreUnavailable,
)
from searchfuse.providers import tavily as tavily_facts
from searchfuse.router import BudgetStatus, Router
from searchfuse.router._keysfile import default_state
from searchfuse.router.status import KeyStatus
from searchfuse.router.tavily import MAX_QUERY_LENGTH

__all__ = ["build_parser", "explain_refusal", "format_status", "main"]

_T = TypeVar("_T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_CONFIG = Path("config/keys.json")
MAX_COUNT = 20

GITIGNORE_LINES = [
    "# searchfuse: live keys, their backups and router state stay out of git",
    "config/keys.json",
    "config/keys.json.bak.*",
    # Anything else named after the keys file: temp files of an interrupted
    # write (they hold keys), files moved aside.
    "config/keys.json.*",
    "config/.keys.json.*",
    "state/",
]


class UsageError(Exception):
    """The command line cannot be run as given (exit 2, one line)."""


#: The keys of the router the command built: nothing the CLI writes shows them raw.
_KNOWN_KEYS: set[str] = set()


def _shown(text: str) -> str:
    """`text` as the CLI writes it: keys masked, control characters escaped.

    Account names, notes, stored errors and server text can hold a pasted key
    or a terminal escape sequence; neither reaches the terminal as it is (JSON
    output escapes control characters itself, so it stays valid JSON).
    """
    return escape_controls(redact(text, _KNOWN_KEYS), keep="\n")


@functools.cache
def _dropping(chars: str) -> dict[int, None]:
    """A `str.translate` table deleting `chars`."""
    return dict.fromkeys(map(ord, chars))


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with control and format characters (ESC, CR, bidi overrides...)
    shown as escapes such as `\\x1b`, except those in `keep`."""
    if text.isprintable() or (keep and text.translate(_dropping(keep)).isprintable()):
        return text
    return "".join(
        ch
        if ch in keep or ch.isprintable() or unicodedata.category(ch) == "Zs"
        else ch.encode("unicode_escape", "backslashreplace").decode("ascii")
        for ch in text
    )


#: The characters searchfuse's own output uses, and their ASCII stand-ins (one for one,
#: so that columns stay aligned) for a terminal whose encoding lacks them (a latin-1 or
#: `LANG=C` locale): a masked key reads `tvly-dev-~0001` there.
_GLYPHS = "…·█░─—"
_PLAIN = str.maketrans(_GLYPHS, "~-#.--")


def _can_show(stream: Any) -> bool:
    """Whether `stream` can encode the characters searchfuse's output uses."""
    try:
        _GLYPHS.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _tolerant(stream: Any) -> None:
    """Make `stream` write `?` for a character its encoding lacks (an account
    name in another script on a latin-1 terminal) instead of failing."""
    if not _can_show(stream):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="replace")


def _write(stream: Any, text: str) -> None:
    text = _shown(text)
    if not _can_show(stream):
        text = text.translate(_PLAIN)
    stream.write(text + "\n")


def _out(text: str = "") -> None:
    _write(sys.stdout, text)


def _err(text: str) -> None:
    _write(sys.stderr, text)


class _RedactingFormatter(logging.Formatter):
    """Log lines on stderr: keys masked, control characters escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return _shown(super().format(record))


def _json(data: Any) -> None:
    # Strict JSON whatever a server sent: no NaN, no Infinity.
    _out(json.dumps(_finite(data), indent=2, allow_nan=False))


# -- building a router from the options ------------------------------------------


def _config_path(args: argparse.Namespace) -> Path | None:
    if args.config:
        return Path(args.config)
    if os.environ.get("SEARCHFUSE_CONFIG"):
        return Path(os.environ["SEARCHFUSE_CONFIG"])
    # A dangling link is named in the error, not taken for "no keys file".
    if DEFAULT_CONFIG.exists() or DEFAULT_CONFIG.is_symlink():
        return DEFAULT_CONFIG
    return None


def _state_location(args: argparse.Namespace, config: Path | None) -> str | Path | None:
    """The state the options name: `--state`, `SEARCHFUSE_STATE`, else `state/`
    beside the keys file, else the user's state directory."""
    state: str | None = args.state or os.environ.get("SEARCHFUSE_STATE") or None
    if state:
        return state
    return default_state(config) if config is not None else str(user_state_path())


def make_router(args: argparse.Namespace, **router_options: Any) -> Router:
    """The router the options describe: `--config` / `SEARCHFUSE_CONFIG` /
    `config/keys.json`, else keys from the environment; `router_options` go to
    the router as they are."""
    options: dict[str, Any] = dict(router_options)
    path = _config_path(args)
    options.setdefault("state", _state_location(args, path))
    try:
        if path is not None:
            router = Router.from_config(path, **options)
        else:
            router = Router.from_env(**options)
    except OSError as exc:
        # The keys file's own errors are ConfigErrors: this is the state's folder or file.
        where = os.path.abspath(exc.filename) if exc.filename else options.get("state", "state/")
        raise UsageError(
            f"searchfuse: error: cannot keep the router state at {where} "
            f"({exc.strerror or exc}); choose a writable place with --state PATH "
            "or SEARCHFUSE_STATE"
        ) from None
    _KNOWN_KEYS.update(entry.key for entry in router.keys)
    return router


def _read_only(args: argparse.Namespace, instead: str, read: Callable[[Router], _T]) -> _T:
    """`read(router)` for a command that only reads state (`status`, `diagnose`).

    A state file this user may read but not write (a service's state folder, a
    read-only disk) is read from a private copy, and stderr says so and what is
    not done (`instead`); a store writes even to read, so it is looked at before
    anything is opened (and before a probe is spent). A state file this user
    cannot read is a usage error naming its owner.
    """
    state = _state_location(args, _config_path(args))
    path = None if state is None or "://" in str(state) else Path(state).absolute()
    if path is None or not path.exists():
        return read(make_router(args))
    unreadable = _readonly.unreadable(path)
    if unreadable:
        raise UsageError(
            f"searchfuse: error: cannot read the router state at {path} ({unreadable}); "
            "run the command as the user who owns it, or name another state with --state PATH"
        )
    why = _readonly.blocked_write(path)
    if why is None:
        return read(make_router(args))
    with tempfile.TemporaryDirectory(prefix="searchfuse-") as folder:
        copy = _readonly.private_copy(path, Path(folder))
        with make_router(args, state=copy) as router:
            _err(f"note: {path} cannot be written ({why}), so {instead}")
            return read(router)


def user_state_path() -> Path:
    """Where the CLI keeps state for keys from the environment: the user's state
    directory (`platformdirs`), never the working directory."""
    import platformdirs

    return Path(platformdirs.user_state_dir("searchfuse")) / "searchfuse.db"


# -- formatting ---------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:g}" if value != int(value) else str(int(value))


@dataclass(frozen=True)
class _Column:
    title: str
    #: Free text that may wrap at word boundaries when the terminal is narrow.
    wraps: bool = False
    #: The narrowest a wrapping column gets (a longer word still shows whole).
    min_width: int = 8
    cells: list[str] = field(default_factory=list)


def _terminal_width() -> int:
    return shutil.get_terminal_size(fallback=(120, 24)).columns


def _fit(columns: list[_Column], width: int) -> list[int] | None:
    """Column widths that fit `width` by wrapping free text between words, or `None`.

    The widest wrapping column gives up room first, down to its longest word
    (words are never cut) and its `min_width`.
    """
    gap = 2
    widths = [max(len(c.title), *(len(cell) for cell in c.cells)) for c in columns]
    floors = [
        max(
            len(c.title),
            min(w, max(c.min_width, *(len(word) for cell in c.cells for word in cell.split()))),
        )
        if c.wraps
        else w
        for c, w in zip(columns, widths, strict=True)
    ]
    if sum(floors) + gap * (len(columns) - 1) > width:
        return None
    while sum(widths) + gap * (len(columns) - 1) > width:
        i = max(range(len(widths)), key=lambda j: widths[j] - floors[j])
        widths[i] -= 1
    return widths


def _wrap(cell: str, width: int) -> list[str]:
    """`cell`'s lines at `width`, cut between words."""
    if len(cell) <= width and cell.isprintable() and cell == cell.strip():
        return [cell]  # what textwrap gives, without its work (a table may have 10,000 rows)
    return textwrap.wrap(cell, width, break_long_words=False, break_on_hyphens=False) or [""]


def _table(columns: list[_Column], widths: list[int]) -> str:
    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    lines = [line([c.title for c in columns])]
    for row in range(len(columns[0].cells)):
        wrapped = [
            _wrap(c.cells[row], w) if c.wraps else [c.cells[row]]
            for c, w in zip(columns, widths, strict=True)
        ]
        for n in range(max(len(parts) for parts in wrapped)):
            lines.append(line([parts[n] if n < len(parts) else "" for parts in wrapped]))
    return "\n".join(lines)


def _stacked(columns: list[_Column], width: int) -> str:
    """One block per key, for a terminal too narrow for the table: `TITLE: value` lines."""
    blocks = []
    for row in range(len(columns[0].cells)):
        lines = [columns[0].cells[row]]
        for c in columns[1:]:
            cell = c.cells[row]
            if cell == "-":
                continue
            lines += textwrap.wrap(
                f"{c.title.lower()}: {cell}",
                width,
                initial_indent="  ",
                subsequent_indent="    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def format_status(records: Sequence[KeyStatus], width: int | None = None) -> str:
    """The `searchfuse status` table, fitted to `width` (default: the terminal's).

    Free text (account, notes, cooldown, last error) wraps at word boundaries
    instead of being cut; a terminal too narrow even for that gets one block
    per key. Ages read as the diagnosis writes them ("30 min ago").
    """
    key = _Column("KEY")
    account = _Column("ACCOUNT", wraps=True)
    notes = _Column("NOTES", wraps=True)
    state = _Column("STATE")
    usage_col = _Column("USED/LIMIT")
    remaining = _Column("LEFT")
    cooldown = _Column("COOLDOWN", wraps=True)
    error = _Column("LAST ERROR", wraps=True, min_width=16)
    synced = _Column("SYNCED")
    for s in records:
        usage = s.key_usage
        if usage is not None:
            usage += s.local_credits
        limit = s.key_limit if s.key_limit is not None else s.plan_limit
        key.cells.append(escape_controls(s.key))
        account.cells.append(escape_controls(s.account or "-"))
        notes.cells.append(escape_controls(s.notes or "-"))
        state.cells.append(s.state)
        # No limit in a synced answer is an unlimited key; before any answer
        # (or for a provider without figures) the limit is unknown, not unlimited.
        no_limit = "unlimited" if s.last_sync_age is not None else "?"
        usage_col.cells.append(f"{_num(usage)}/{_num(limit) if limit is not None else no_limit}")
        remaining.cells.append(_num(s.remaining) if s.remaining is not None else "?")
        cooldown.cells.append(
            escape_controls(f"{duration(s.cooldown_left)} ({s.cooldown_reason or s.state})")
            if s.cooldown_left > 0
            else "-"
        )
        error.cells.append(escape_controls(s.last_error or "-"))
        synced.cells.append(ago(s.last_sync_age))
    columns = [key, account, notes, state, usage_col, remaining, cooldown, error, synced]
    width = _terminal_width() if width is None else width
    providers = list(dict.fromkeys(s.provider for s in records))
    if len(providers) > 1:
        # A chain: one table per provider, in chain order, each under its name.
        return "\n\n".join(
            f"{name}\n" + format_status([s for s in records if s.provider == name], width)
            for name in providers
        )
    widths = _fit(columns, width)
    return _table(columns, widths) if widths is not None else _stacked(columns, width)


def _line(value: Any, limit: int) -> str:
    """`value` as one line of printable text, at most `limit` characters."""
    text = "" if value is None else str(value)[: limit * 4]
    # A lone surrogate (a truncated emoji in the server's JSON) cannot be printed.
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text[:limit]


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities replaced by `None`: what JSON can say."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def format_results(data: dict[str, Any]) -> str:
    """A search answer as text for people."""
    # The answer comes from a server: any field may be missing or oddly shaped.
    lines = []
    if data.get("answer"):
        lines += [f"Answer: {_line(data['answer'], 2000)}", ""]
    results = data.get("results")
    items = results if isinstance(results, list) else []
    for i, item in enumerate(items, 1):
        item = item if isinstance(item, dict) else {"content": item}
        lines.append(f"{i}. {_line(item.get('title'), 200)}")
        lines.append(f"   {_line(item.get('url'), 500)}")
        content = _line(item.get("content"), 4000)
        if content:
            lines.append(f"   {textwrap.shorten(content, 240, placeholder=' …')}")
    if not items:
        lines.append("(no results)")
    served = data.get("searchfuse")
    served = served if isinstance(served, dict) else {}
    if served:
        who = served.get("served_by", "?")
        key = served.get("key")
        lines += ["", f"served by {who}" + (f" with key {key}" if key else "")]
    return "\n".join(lines)


def _clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def explain_refusal(exc: SearchRefused, now: float | None = None) -> str:
    """A refusal told to a person: what happened, and when to try again.

    The exception's `message` is written for a language model ("do not switch
    to another search tool"); this is the text for someone at a terminal.
    """
    now = _clock.now() if now is None else now
    wait = exc.retry_after
    when = (
        [f"Try again in {duration(wait)} (after {_clock_time(now + wait)})."]
        if wait is not None and wait > 0
        else []
    )
    see_status = "`searchfuse status` shows each key's cooldown."
    if isinstance(exc, RateLimited):
        who = f" for key {exc.key}" if exc.key else ""
        parts = [
            f"Tavily answered 429 (too many requests){who}.",
            "searchfuse holds every search until the cooldown ends, so nothing more was sent.",
            *when,
            see_status,
        ]
    elif isinstance(exc, CooldownActive):
        parts = [
            f"Nothing was sent: a cooldown after a {exc.cause} is still running.",
            *when,
            see_status,
        ]
    elif exc.reason == "paced":
        parts = [
            "Nothing was sent: every key is at its request rate (Tavily's limit per minute),",
            "and waiting for room would take too long.",
            *when,
        ]
    elif isinstance(exc, NoKeyAvailable):
        lines = [" ".join(["No key can serve right now.", *when])]
        if exc.diagnosis is not None:
            lines.append(str(exc.diagnosis))
        else:
            lines += [f"  {key}: {why}" for key, why in exc.reasons.items()]
        lines.append("`searchfuse diagnose --probe` asks Tavily about every key.")
        return "\n".join(lines)
    else:
        return exc.message
    return " ".join(parts)


# -- commands ------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch or args.interval is not None:
        return _watch_status(args)
    instead = "status reads a copy of it and writes nothing back"
    only_budgets = args.budgets or args.user or args.conversation
    records, budgets, now = _read_only(args, instead, _status_of(args, not only_budgets))
    if only_budgets:
        _show_budgets(args, budgets, now)
    elif args.json:
        _json([r.to_dict() for r in records])
    else:
        _out(format_status(records))
        if budgets:
            _out()
            _show_budgets(args, budgets, now)
    return EXIT_OK


def _status_of(
    args: argparse.Namespace, keys: bool
) -> Callable[[Router], tuple[list[KeyStatus], list[BudgetStatus], float]]:
    """What `status` reads of a router: its keys (when `keys`), its budgets, its time."""

    def read(router: Router) -> tuple[list[KeyStatus], list[BudgetStatus], float]:
        try:
            budgets = router.budgets(user=args.user, conversation=args.conversation)
        except ValueError as exc:
            raise UsageError(f"searchfuse status: error: {exc}") from None
        return (router.status() if keys else []), budgets, router.now()

    return read


def _show_budgets(args: argparse.Namespace, rows: Sequence[BudgetStatus], now: float) -> None:
    """`status --budgets`: each budget's use (`SEARCHFUSE_BUDGETS`), every process counted."""
    if args.json:
        _json([row.to_dict() for row in rows])
    else:
        lines = [escape_controls(row.summary(now)) for row in rows] or ["no budgets set"]
        _out("budgets\n" + "\n".join(f"  {line}" for line in lines))


def _watch_status(args: argparse.Namespace) -> int:
    """`status --watch`: the live view (searchfuse/_watch.py) until Ctrl-C."""
    if not args.watch:
        raise UsageError("searchfuse status: error: --interval only applies with --watch")
    if args.json:
        raise UsageError("searchfuse status: error: --watch draws a live view; leave out --json")
    from searchfuse import _watch

    args.interval = _watch.DEFAULT_INTERVAL if args.interval is None else args.interval
    try:
        return _watch.run(args, make_router)
    except ImportError as exc:
        raise UsageError(f"searchfuse status: error: {exc}") from None


def cmd_test_keys(args: argparse.Namespace) -> int:
    router = make_router(args)
    results = router.test_keys(spend=args.spend)
    unprobed = [r for r in results if r.status_code is None and r.note.startswith("not probed")]
    if args.json:
        _json([r.to_dict() for r in results])
    else:
        chain = len({r.provider for r in results}) > 1
        for r in results:
            who = f"{r.provider}  {r.key}" if chain else r.key
            if r.ok:
                _out(f"{who}  ok")
            elif r in unprobed:
                _out(f"{who}  {r.note} (--spend checks it with one search)")
            else:
                _out(f"{who}  FAIL  {r.note}")
        _out()
        _out(format_status(router.status()))
    # A CI gate: every key that was checked must answer, not just one.
    checked = [r for r in results if r not in unprobed]
    return EXIT_OK if checked and all(r.ok for r in checked) else EXIT_FAILED


def cmd_search(args: argparse.Namespace) -> int:
    query = args.query if args.query is not None else args.query_option
    if query is None:
        raise UsageError("searchfuse search: error: give a query: searchfuse search QUERY")
    if args.query is not None and args.query_option is not None:
        raise UsageError("searchfuse search: error: give the query once, not as QUERY and --query")
    query = _query(query)
    router = make_router(args)
    params: dict[str, Any] = {}
    if args.depth:
        params["search_depth"] = args.depth
    if args.topic:
        params["topic"] = args.topic
    data = router.search(query, max_results=args.count, **params)
    if args.json:
        _json(data)
    else:
        _out(format_results(data))
    return EXIT_OK


def cmd_reset_month(args: argparse.Namespace) -> int:
    router = make_router(args)
    router.reset_month()
    keys = [entry.masked for entry in router.keys]
    if args.json:
        _json({"cleared": len(keys), "keys": keys})
    else:
        _out(f"state cleared for {len(keys)} key(s); cooldowns and usage figures are gone")
    return EXIT_OK


def cmd_diagnose(args: argparse.Namespace) -> int:
    instead = "diagnose reads a copy of it" + (
        "; what the probe learns is not saved (run it as the state's owner for that)"
        if args.probe
        else " and writes nothing back"
    )
    diagnosis = _read_only(args, instead, lambda router: router.diagnose(probe=args.probe))
    if args.json:
        _json(diagnosis.to_dict())
    else:
        _out(str(diagnosis))
        if len(diagnosis.by_provider) > 1:
            _out("by provider: " + ", ".join(f"{n} {v}" for n, v in diagnosis.by_provider.items()))
    return EXIT_OK if diagnosis.verdict in ("healthy", "stale") else EXIT_FAILED


def _template() -> bytes:
    return (resources.files("searchfuse") / "templates" / "keys.example.json").read_bytes()


#: Fields of a keys file entry a published template keeps (nothing secret or personal).
_PUBLISHED_FIELDS = ("provider", "rate", "rpm", "price", "disabled")


def _publish_template(keys: Path) -> bytes:
    """`config/keys.publish.json`: the keys file's shape with no key in it, safe to
    commit or ship in a package. Every key is a placeholder (one per entry, in
    order), account names become `account-1`, `account-2`... (so keys sharing a
    plan still share one), notes are dropped, a URL loses its user and password.
    A keys file that cannot be read gives the shipped example instead."""
    try:
        data = json.loads(keys.read_bytes())
        entries = data["keys"] if isinstance(data, dict) else data
        if not isinstance(entries, list):
            raise ValueError("keys is not a list")
    except (OSError, ValueError, KeyError, TypeError):
        return _template()
    accounts: dict[str, str] = {}
    counts: dict[str, int] = {}
    published: list[dict[str, Any]] = []
    for entry in entries:
        item = entry if isinstance(entry, dict) else {"key": entry}
        out = {k: item[k] for k in _PUBLISHED_FIELDS if k in item}
        provider = str(item.get("provider") or "tavily")
        if "url" in item:
            out["url"] = redact(str(item["url"]), ())
        else:
            counts[provider] = counts.get(provider, 0) + 1
            prefix = "tvly" if provider == "tavily" else provider
            out["key"] = f"{prefix}-your-key-{counts[provider]}"
        account = item.get("account")
        if isinstance(account, str) and account:
            out["account"] = accounts.setdefault(account, f"account-{len(accounts) + 1}")
        published.append(out)
    template: dict[str, Any] = {"format_version": 2}
    if isinstance(data, dict) and isinstance(data.get("providers"), list):
        template["providers"] = data["providers"]
    template["keys"] = published
    return (json.dumps(template, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _folder(path: Path, what: str) -> None:
    """Create `path` as a folder, or explain in one line why it cannot be one."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"searchfuse init: error: {path} is a file, not a folder ({what})")
    try:
        # Never writable by others, whatever the umask: they could replace keys.json.
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as exc:
        raise UsageError(
            f"searchfuse init: error: cannot create {path} ({what}): {exc.strerror or exc}"
        ) from None


def cmd_init(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    config_dir = root / "config"
    state_dir = root / "state"
    keys = config_dir / "keys.json"
    example = config_dir / "keys.example.json"
    publish = config_dir / "keys.publish.json"
    gitignore = root / ".gitignore"
    _refuse_global_paths(args, "init", "it sets up DIR/config/keys.json and DIR/state/")
    _folder(root, "the project folder")
    _folder(config_dir, "for config/keys.json")
    state_existed = state_dir.is_dir()
    _folder(state_dir, "for router state")
    for path in (keys, example, publish, gitignore):
        if path.exists() and not path.is_file():
            raise UsageError(f"searchfuse init: error: {path} exists and is not a file")
    done: dict[str, list[str]] = {"created": [], "kept": [], "updated": []}
    lines: list[str] = []
    try:
        os.chmod(state_dir, 0o700)
        if keys.exists():
            done["kept"].append(str(keys))
            lines.append(f"kept {keys} (it exists; nothing was overwritten)")
            mode = stat.S_IMODE(keys.stat().st_mode)
            if mode & 0o077:
                warning = (
                    f"warning: {keys} holds API keys and can be read by other users "
                    f"(mode {mode:03o}); run: chmod 600 {keys}"
                )
                done.setdefault("warnings", []).append(warning)
                _err(warning)
        else:
            fd = os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(_template())
            done["created"].append(str(keys))
            lines.append(f"created {keys} (mode 0600): replace the placeholder keys with yours")
        if not example.exists():
            example.write_bytes(_template())
            done["created"].append(str(example))
            lines.append(f"created {example}")
        if not publish.exists():
            fd = os.open(publish, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(_publish_template(keys))
            done["created"].append(str(publish))
            lines.append(f"created {publish}: {keys} without its keys, safe to commit or ship")
        present = gitignore.read_text().splitlines() if gitignore.exists() else []
        missing = [line for line in GITIGNORE_LINES[1:] if line not in present]
        if missing:
            with gitignore.open("a") as fh:
                if present and present[-1].strip():
                    fh.write("\n")
                fh.write("\n".join([GITIGNORE_LINES[0], *missing]) + "\n")
            done["updated"].append(str(gitignore))
            lines.append(f"updated {gitignore}: {', '.join(missing)} stay out of git")
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        raise UsageError(
            f"searchfuse init: error: cannot write{where}: {exc.strerror or exc}"
        ) from None
    if not state_existed:
        done["created"].append(f"{state_dir}/")
        lines.append(f"created {state_dir}/ for router state")
    if args.json:
        _json(done)
    else:
        for line in lines:
            _out(line)
    return EXIT_OK


def _refuse_global_paths(args: argparse.Namespace, command: str, why: str) -> None:
    """`--config` and `--state` name an existing setup; `command` makes its own."""
    given = [f"--{name}" for name in ("config", "state") if getattr(args, name, None)]
    if given:
        raise UsageError(
            f"searchfuse {command}: error: {' and '.join(given)} "
            f"{'do' if len(given) > 1 else 'does'} not apply to {command} "
            f"({why}); leave them out (see searchfuse {command} --help)"
        )


def cmd_demo(args: argparse.Namespace) -> int:
    from searchfuse.demo import run_demo

    _refuse_global_paths(args, "demo", "it runs offline on a temporary folder of its own")
    return run_demo(json_output=args.json)


# -- argument types: each refuses bad input with one line -------------------------------


def _query(text: str) -> str:
    if not text.strip():
        raise UsageError("searchfuse search: error: the query is empty")
    if len(text) > MAX_QUERY_LENGTH:
        raise UsageError(
            f"searchfuse search: error: the query is {len(text)} characters; "
            f"Tavily accepts at most {MAX_QUERY_LENGTH}"
        )
    return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{value} is not in 0-{MAX_COUNT}")
    return value


def _path(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the path is empty")
    if "\0" in text:
        raise argparse.ArgumentTypeError("the path contains a NUL character")
    return text


# -- searchfuse mcp ----------------------------------------------------------------------


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve `tavily_search` to MCP clients until they go away (stdio) or Ctrl-C (HTTP)."""
    try:
        from searchfuse.integrations.mcp import serve
    except ImportError as exc:
        raise UsageError(f"searchfuse mcp: error: {exc}") from None
    try:
        serve(
            make_router(args),
            http_port=args.http,
            host=args.host,
            per_turn=args.per_turn,
            min_interval=args.min_interval,
            ready=lambda url: _err(
                f"searchfuse mcp: serving web_search and tavily_search on {url} (streamable HTTP); "
                "stop with Ctrl-C"
            ),
        )
    except OSError as exc:
        raise UsageError(f"searchfuse mcp: error: {exc.strerror or exc}") from None
    return EXIT_OK


def _number_in(low: float, high: float, kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low:g}-{high:g}")
        return value

    return parse


def _add_mcp(add: Callable[..., Any]) -> None:
    p = add(
        "mcp", cmd_mcp, "serve web_search and tavily_search, guarded and routed, to MCP clients"
    )
    p.add_argument(
        "--http",
        type=_number_in(1, 65535, int),
        metavar="PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    p.add_argument("--host", default="127.0.0.1", help="where --http listens (default 127.0.0.1)")
    p.add_argument(
        "--per-turn",
        type=_number_in(0, 100, int),
        default=1,
        metavar="N",
        help="searches per turn (default 1)",
    )
    p.add_argument(
        "--min-interval",
        type=_number_in(0, 3600, float),
        default=2.0,
        metavar="SECONDS",
        help="calls starting within this many seconds of the previous one are one turn "
        "(default 2; overlapping calls always are)",
    )


# -- searchfuse gateway ------------------------------------------------------------------


def cmd_gateway(args: argparse.Namespace) -> int:
    """Serve Tavily's API in front of the router until SIGTERM or Ctrl-C."""
    from searchfuse.gateway import StartRefused, _cli

    try:
        return _cli.run(args, make_router)
    except (StartRefused, ImportError) as exc:
        raise UsageError(f"searchfuse gateway: error: {exc}") from None


# -- searchfuse dashboard ----------------------------------------------------------------


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve the read-only dashboard page until SIGTERM or Ctrl-C."""
    from searchfuse.dashboard import StartRefused, _cli

    try:
        return _cli.run(args, make_router)
    except (StartRefused, ImportError) as exc:
        raise UsageError(f"searchfuse dashboard: error: {exc}") from None


# -- parser ----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the `--help` hint), not the usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the docs tests to check SKILL.md)."""

    def common(suppress: bool, paths: bool = True) -> _Parser:
        # The options are accepted before and after the command; in a subcommand
        # they default to SUPPRESS so they never erase a value given before it.
        # A command that sets up its own folders (init, demo) still parses
        # --config/--state, to refuse them by name, but does not offer them.
        default: Any = argparse.SUPPRESS if suppress else None
        config_help = (
            "keys file (default: $SEARCHFUSE_CONFIG, else config/keys.json, "
            "else the keys in the environment)"
        )
        state_help = (
            "state: a path (SQLite; .json for the JSON file), a redis:// URL "
            "(default: $SEARCHFUSE_STATE, else state/searchfuse.db beside config/, "
            "else the user's state directory)"
        )
        if not paths:
            config_help = state_help = argparse.SUPPRESS
        p = _Parser(add_help=False)
        p.add_argument(
            "--config",
            type=_path,
            default=default,
            help=config_help,
        )
        p.add_argument(
            "--state",
            type=_path,
            default=default,
            help=state_help,
        )
        p.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=argparse.SUPPRESS if suppress else False,
            help="log what the router does",
        )
        return p

    parser = _Parser(
        prog="searchfuse",
        description="Guard and route AI agents' web searches: a pool of Tavily keys, "
        "and Exa, Brave, Serper and SearXNG behind it as a chain.",
        parents=[common(False)],
    )
    parser.add_argument("--version", action="version", version=f"searchfuse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, func: Callable[[argparse.Namespace], int], text: str, paths: bool = True
    ) -> Any:
        p = sub.add_parser(name, help=text, description=text, parents=[common(True, paths)])
        p.set_defaults(func=func)
        return p

    def json_flag(p: argparse.ArgumentParser, text: str = "print JSON") -> None:
        p.add_argument("--json", action="store_true", help=text)

    p = add("status", cmd_status, "show every key: usage, remaining quota, cooldown, last error")
    json_flag(p)
    p.add_argument(
        "--budgets",
        action="store_true",
        help="show only the spend budgets (SEARCHFUSE_BUDGETS): used, limit and left",
    )
    p.add_argument("--user", metavar="ID", help="with budgets: this user's use")
    p.add_argument("--conversation", metavar="ID", help="with budgets: this conversation's use")
    p.add_argument(
        "--watch", action="store_true", help="a live view until Ctrl-C (the watch extra)"
    )
    p.add_argument(
        "--interval",
        type=_number_in(0.1, 3600, float),
        metavar="SECONDS",
        help="with --watch: seconds between reads of the state (default 2)",
    )
    p = add(
        "test-keys", cmd_test_keys, "check every key with its free probe, one at a time (no search)"
    )
    p.add_argument(
        "--spend",
        action="store_true",
        help="check keys whose provider has no free probe with a one-result search (costs it)",
    )
    json_flag(p)
    p = add("search", cmd_search, "run one search through the router")
    p.add_argument("query", nargs="?", help="the search query (at most 400 characters)")
    p.add_argument(
        "--query", "-q", dest="query_option", metavar="QUERY", help="the query, as an option"
    )
    p.add_argument(
        "--count", "-n", type=_count, default=5, help="number of results, 0-20 (default 5)"
    )
    p.add_argument(
        "--depth", choices=tavily_facts.SEARCH_DEPTHS, help="Tavily's search depth (default basic)"
    )
    p.add_argument(
        "--topic",
        choices=tavily_facts.TOPICS,
        help="the topic; a provider that cannot honour it is passed over",
    )
    json_flag(p, "print the result as JSON (Tavily's shape, and who served it)")
    p = add(
        "reset-month", cmd_reset_month, "forget local state (cooldowns, usage figures, counters)"
    )
    json_flag(p)
    p = add("diagnose", cmd_diagnose, "explain in verification order why keys can or cannot serve")
    p.add_argument(
        "--probe",
        action="store_true",
        help="also probe each key where it is free (Tavily's /usage, SearXNG's /healthz)",
    )
    json_flag(p)
    p = add(
        "init",
        cmd_init,
        "create config/keys.json (0600), its example and publishable copies, state/ "
        "and .gitignore entries",
        False,
    )
    p.add_argument("dir", nargs="?", default=".", type=_path, help="project folder (default: .)")
    json_flag(p, "print what was created, kept and updated as JSON")
    p = add("demo", cmd_demo, "run an offline demo against a simulated Tavily and Exa", False)
    json_flag(p, "print the transcript as JSON")
    _add_mcp(add)
    from searchfuse.gateway._cli import add_arguments as gateway_arguments

    gateway_arguments(add("gateway", cmd_gateway, "serve Tavily's API in front of the router"))
    from searchfuse.dashboard._cli import add_arguments as dashboard_arguments

    dashboard_arguments(add("dashboard", cmd_dashboard, "serve a read-only web page of the state"))
    return parser


def _fail(json_output: bool, kind: str, message: str, extra: dict[str, Any] | None = None) -> None:
    """Report an error: one block on stderr, and a JSON object on stdout under `--json`."""
    if json_output:
        _json({"error": kind, "message": message, **(extra or {})})
    _err(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):
        _tolerant(stream)
    wants_json = "--json" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        _fail(wants_json, "usage", str(exc))
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    json_output = bool(getattr(args, "json", False))
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
            handler.setFormatter(_RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    try:
        return int(args.func(args))
    except UsageError as exc:
        _fail(json_output, "usage", str(exc))
        return EXIT_USAGE
    except ConfigError as exc:
        _fail(json_output, "config", f"config error: {exc}")
        return EXIT_USAGE
    except SearchRefused as exc:
        if json_output:
            _json(exc.to_dict())
        _err(explain_refusal(exc))
        return EXIT_FAILED
    except StoreUnavailable as exc:
        # The state store named by --state / SEARCHFUSE_STATE cannot be used
        # (Redis down, a wrong URL): the environment, like a bad config.
        _fail(json_output, "store", str(exc))
        return EXIT_USAGE
    except SearchFailed as exc:
        _fail(json_output, "failed", str(exc), {"status_code": exc.status_code})
        return EXIT_FAILED
    except OSError as exc:
        # A path the options named that cannot be used: a usage error, not a crash.
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(json_output, "usage", f"searchfuse: error: {where}{exc.strerror or exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _fail(json_output, "interrupted", "searchfuse: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
