#!/usr/bin/env python3
"""The old ``tavily_multi_key.py`` commands, kept working on top of ``searchfuse``.

    tavily_multi_key.py status
    tavily_multi_key.py test-keys
    tavily_multi_key.py search --query "..." --count 5
    tavily_multi_key.py reset-month

Every command runs the ``searchfuse`` command of the same name; ``--config``,
``--state`` and ``--json`` pass through.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from searchfuse.cli import main as searchfuse_main


def translate(argv: Sequence[str]) -> list[str]:
    """The ``searchfuse`` arguments for an old-style command line."""
    parser = argparse.ArgumentParser(prog="tavily_multi_key.py")
    parser.add_argument("--config")
    parser.add_argument("--state")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("status", "test-keys", "reset-month"):
        p = sub.add_parser(name)
        p.add_argument("--json", action="store_true")
    p = sub.add_parser("search")
    p.add_argument("--query", "-q", required=True)
    p.add_argument("--count", "-n", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = [args.command]
    if args.command == "search":
        out += [args.query, "--count", str(args.count)]
    if getattr(args, "json", False):
        out.append("--json")
    for option in ("config", "state"):
        if getattr(args, option):
            out += [f"--{option}", getattr(args, option)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run an old-style command through the ``searchfuse`` command line."""
    try:
        return searchfuse_main(translate(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
