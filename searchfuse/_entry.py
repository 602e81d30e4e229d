"""The `searchfuse` command's entry point: Ctrl-C while the command line is still
being imported (most of a second: the router, httpx, the stores) ends it as
Ctrl-C does later, with exit 130 and one line, not a traceback."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (`searchfuse.cli.main`) with `argv`."""
    try:
        cli = importlib.import_module("searchfuse.cli")
    except KeyboardInterrupt:
        print("searchfuse: interrupted", file=sys.stderr)
        return 130
    code: int = cli.main(argv)
    return code
