"""Which process made a file or a connection: a fork counter, not `os.getpid()`.

A forked child must not use its parent's open files, locks or database
connections, and the stores ask on every transaction. `os.getpid()` is a
system call each time (glibc no longer caches it); the count of forks this
process descends through, kept by `os.register_at_fork`, is a global read.
Every fork that runs Python in the child counts (`os.fork`, `os.forkpty`,
multiprocessing's "fork" start method); `subprocess` children run no Python.
"""

from __future__ import annotations

import os

__all__ = ["generation"]

_forks = 0


def _forked() -> None:
    global _forks
    _forks += 1


def generation() -> int:
    """How many forks made this process from the interpreter that imported this
    module: a value kept with a resource is still current only in its process."""
    return _forks


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forked)
