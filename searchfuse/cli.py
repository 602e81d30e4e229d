"""``searchfuse``: the command line (status, test-keys, search, reset-month, diagnose, init, demo).

Exit codes: 0 ok, 1 the search failed or was refused, 2 a usage or config error.
Keys are never printed: only masked forms and fingerprints.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from searchfuse.errors import ConfigError, SearchFailed, SearchRefused
from searchfuse.router import Router
from searchfuse.router.status import KeyStatus

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_CONFIG = Path("config/keys.json")
DEFAULT_STATE = Path("state/quota.json")

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


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


# -- building a router from the options ------------------------------------------


def _config_path(args: argparse.Namespace) -> Path | None:
    if args.config:
        return Path(args.config)
    if os.environ.get("SEARCHFUSE_CONFIG"):
        return Path(os.environ["SEARCHFUSE_CONFIG"])
    if DEFAULT_CONFIG.exists():
        return DEFAULT_CONFIG
    return None


def make_router(args: argparse.Namespace) -> Router:
    """The router the options describe: ``--config`` / ``SEARCHFUSE_CONFIG`` /
    ``config/keys.json``, else keys from the environment."""
    state: str | None = args.state or os.environ.get("SEARCHFUSE_STATE") or None
    options: dict[str, Any] = {}
    if state:
        options["state"] = state
    path = _config_path(args)
    if path is not None:
        return Router.from_config(path, **options)
    options.setdefault("state", str(DEFAULT_STATE))
    return Router.from_env(**options)


# -- formatting ---------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:g}" if value != int(value) else str(int(value))


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h ago"
    return f"{seconds / 86400:.0f}d ago"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    )


def format_status(records: Sequence[KeyStatus]) -> str:
    """The ``searchfuse status`` table."""
    rows = [
        [
            "KEY",
            "ACCOUNT",
            "NOTES",
            "STATE",
            "USAGE/LIMIT",
            "REMAINING",
            "COOLDOWN",
            "LAST ERROR",
            "SYNCED",
        ]
    ]
    for s in records:
        usage = s.key_usage
        if usage is not None:
            usage += s.local_credits
        limit = s.key_limit if s.key_limit is not None else s.plan_limit
        cooldown = f"{s.cooldown_left:.0f}s ({s.cooldown_reason})" if s.cooldown_left > 0 else "-"
        rows.append(
            [
                s.key,
                s.account or "-",
                s.notes or "-",
                s.state,
                f"{_num(usage)}/{_num(limit) if limit is not None else 'unlimited'}",
                _num(s.remaining) if s.remaining is not None else "?",
                cooldown,
                (s.last_error or "-")[:40],
                _age(s.last_sync_age),
            ]
        )
    return _table(rows)


def format_results(data: dict[str, Any]) -> str:
    """A search answer as text for people."""
    lines = []
    if data.get("answer"):
        lines += [f"Answer: {data['answer']}", ""]
    for i, item in enumerate(data.get("results") or [], 1):
        lines.append(f"{i}. {item.get('title', '')}")
        lines.append(f"   {item.get('url', '')}")
        content = str(item.get("content") or "").strip().replace("\n", " ")
        if content:
            lines.append(f"   {content[:240]}")
    if not data.get("results"):
        lines.append("(no results)")
    served = data.get("searchfuse") or {}
    if served:
        who = served.get("served_by", "?")
        key = served.get("key")
        lines += ["", f"served by {who}" + (f" with key {key}" if key else "")]
    return "\n".join(lines)


# -- commands ------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    router = make_router(args)
    records = router.status()
    if args.json:
        _out(json.dumps([r.to_dict() for r in records], indent=2))
    else:
        _out(format_status(records))
    return EXIT_OK


def cmd_test_keys(args: argparse.Namespace) -> int:
    router = make_router(args)
    results = router.test_keys()
    if args.json:
        _out(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        for r in results:
            _out(f"{r.key}  ok" if r.ok else f"{r.key}  FAIL  {r.note}")
        _out()
        _out(format_status(router.status()))
    return EXIT_OK if any(r.ok for r in results) else EXIT_FAILED


def cmd_search(args: argparse.Namespace) -> int:
    router = make_router(args)
    params: dict[str, Any] = {}
    if args.depth:
        params["search_depth"] = args.depth
    if args.topic:
        params["topic"] = args.topic
    try:
        data = router.search(args.query, max_results=args.count, **params)
    except SearchRefused as exc:
        if args.json:
            _out(json.dumps(exc.to_dict(), indent=2))
        else:
            _err(exc.message)
        return EXIT_FAILED
    except SearchFailed as exc:
        if args.json:
            _out(json.dumps({"error": "failed", "message": str(exc)}, indent=2))
        else:
            _err(str(exc))
        return EXIT_FAILED
    _out(json.dumps(data, indent=2) if args.json else format_results(data))
    return EXIT_OK


def cmd_reset_month(args: argparse.Namespace) -> int:
    router = make_router(args)
    router.reset_month()
    _out(f"state cleared for {len(router.keys)} key(s); cooldowns and usage figures are gone")
    return EXIT_OK


def cmd_diagnose(args: argparse.Namespace) -> int:
    router = make_router(args)
    diagnosis = router.diagnose(probe=args.probe)
    _out(json.dumps(diagnosis.to_dict(), indent=2) if args.json else str(diagnosis))
    return EXIT_OK if diagnosis.verdict in ("healthy", "stale") else EXIT_FAILED


def _template() -> bytes:
    return (resources.files("searchfuse") / "templates" / "keys.example.json").read_bytes()


def cmd_init(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    config_dir = root / "config"
    state_dir = root / "state"
    config_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    keys = config_dir / "keys.json"
    if keys.exists():
        _out(f"kept {keys} (it exists; nothing was overwritten)")
    else:
        fd = os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(_template())
        _out(f"created {keys} (mode 0600): replace the placeholder keys with yours")
    example = config_dir / "keys.example.json"
    if not example.exists():
        example.write_bytes(_template())
        _out(f"created {example}")
    gitignore = root / ".gitignore"
    present = gitignore.read_text().splitlines() if gitignore.exists() else []
    missing = [line for line in GITIGNORE_LINES[1:] if line not in present]
    if missing:
        with gitignore.open("a") as fh:
            if present and present[-1].strip():
                fh.write("\n")
            fh.write("\n".join([GITIGNORE_LINES[0], *missing]) + "\n")
        _out(f"updated {gitignore}: {', '.join(missing)} stay out of git")
    _out(f"created {state_dir}/ for router state")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from searchfuse.demo import run_demo

    return run_demo(json_output=args.json)


# -- parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the docs tests to check SKILL.md)."""

    def common(suppress: bool) -> argparse.ArgumentParser:
        # The options are accepted before and after the command; in a subcommand
        # they default to SUPPRESS so they never erase a value given before it.
        default: Any = argparse.SUPPRESS if suppress else None
        p = argparse.ArgumentParser(add_help=False)
        p.add_argument(
            "--config",
            default=default,
            help="keys file (default: $SEARCHFUSE_CONFIG, else config/keys.json)",
        )
        p.add_argument(
            "--state",
            default=default,
            help="state file (default: $SEARCHFUSE_STATE, else state/quota.json)",
        )
        p.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=argparse.SUPPRESS if suppress else False,
            help="log what the router does",
        )
        return p

    parser = argparse.ArgumentParser(
        prog="searchfuse",
        description="Guard and route Tavily web searches for AI agents.",
        parents=[common(False)],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, func: Callable[[argparse.Namespace], int], text: str) -> Any:
        p = sub.add_parser(name, help=text, description=text, parents=[common(True)])
        p.set_defaults(func=func)
        return p

    p = add("status", cmd_status, "show every key: usage, remaining quota, cooldown, last error")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("test-keys", cmd_test_keys, "probe every key with /usage, one at a time (no search)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("search", cmd_search, "run one search through the router")
    p.add_argument("query", help="the search query (at most 400 characters)")
    p.add_argument("--count", type=int, default=5, help="number of results, 0-20 (default 5)")
    p.add_argument("--depth", choices=["basic", "advanced", "fast", "ultra-fast"])
    p.add_argument("--topic", choices=["general", "news", "finance"])
    p.add_argument("--json", action="store_true", help="print Tavily's JSON")
    add("reset-month", cmd_reset_month, "clear local state (cooldowns, usage figures)")
    p = add("diagnose", cmd_diagnose, "explain in verification order why keys can or cannot serve")
    p.add_argument("--probe", action="store_true", help="also ask /usage for each key directly")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("init", cmd_init, "create config/keys.json (0600), state/ and .gitignore entries")
    p.add_argument("dir", nargs="?", default=".", help="project folder (default: .)")
    p = add("demo", cmd_demo, "run an offline demo against the simulated Tavily")
    p.add_argument("--json", action="store_true", help="print the transcript as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's own usage errors exit 2
        return int(exc.code or 0)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except ConfigError as exc:
        _err(f"config error: {exc}")
        return EXIT_USAGE
    except SearchRefused as exc:
        _err(exc.message)
        return EXIT_FAILED
    except SearchFailed as exc:
        _err(str(exc))
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
