"""What a `state=` value may be, checked before any store touches the disk.

A path names a regular file (or nothing yet) in a folder that exists; the only
folders searchfuse makes are its default state locations (a project's
`state/` folder, in a folder that exists, and the user's state directory).
A URL names Redis (`redis://`, `rediss://`, `unix://`, in any case); any other
URL-like value is a typo, never a local file.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from searchfuse.errors import ConfigError

REDIS_SCHEMES = ("redis", "rediss", "unix")

#: Where a router's default state goes while searchfuse's pytest plugin runs a
#: test (`None`: the usual places). Each test gets a folder of its own, so a
#: cooldown one test wrote on disk never refuses the next one, whose fake clock
#: starts at the same instant.
testing_state: str | None = None
_FIX = (
    "point state= (or --state / SEARCHFUSE_STATE) at a file in an existing folder "
    "(for example state/searchfuse.db), or at a redis://host:6379/0 URL"
)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(//)?")


def state_error(state: object, problem: str, fix: str = _FIX) -> ConfigError:
    """A `state=` value that cannot be used; nothing was created or touched."""
    return ConfigError("state", None, f"{state!r} {problem}", fix)


def redis_url(state: str) -> str | None:
    """`state` with its scheme in lower case if it names Redis, else None.

    Raises ConfigError for any other URL-like value (`reddis://`, `http://`,
    `sqlite:///x.db`, `:memory:`) and for a blank one.
    """
    text = state.strip()
    if not text:
        raise state_error(state, "is blank")
    if text != state:
        raise state_error(state, "has spaces around it")
    if text.startswith(":"):
        raise state_error(state, "is not a path (SQLite's :memory: is not supported)")
    found = _URL.match(text)
    if found is None or (found.group(2) is None and len(found.group(1)) == 1):
        return None  # a path (a Windows drive letter is not a scheme)
    scheme = found.group(1).lower()
    if scheme in REDIS_SCHEMES and found.group(2):
        return scheme + text[len(found.group(1)) :]
    if found.group(2) is None:
        return None  # "name:with-colon" is a file name
    raise state_error(
        state,
        f"has the URL scheme {found.group(1)!r}, which searchfuse does not know "
        "(redis://, rediss:// and unix:// name Redis; anything else is a path)",
    )


def check_path(path: Path) -> bool:
    """Whether `path` exists; ConfigError if it is not a regular file or its
    folder is missing (the user's state directory is made)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        ensure_parent(path)
        return False
    except NotADirectoryError:
        raise state_error(str(path), "is inside something that is not a folder") from None
    except OSError:
        return True  # unreadable: the store says so with its own error
    if stat.S_ISDIR(info.st_mode):
        raise not_state(path, "it is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise not_state(path, "it is not a regular file")
    return True


def ensure_parent(path: Path) -> None:
    """Make sure `path`'s folder exists: ConfigError if it does not, unless it
    is the user's state directory or a project's `state/` folder in a folder
    that exists (made, 0700)."""
    parent = path.parent
    if parent.is_dir():
        return
    if parent.exists():
        raise state_error(str(path), f"is inside {str(parent)!r}, which is not a folder")
    if _is_user_state_dir(parent):
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return
    if parent.name == "state" and parent.parent.is_dir():
        # A project's state/ folder (state="state/searchfuse.db"): one level only.
        parent.mkdir(mode=0o700, exist_ok=True)
        return
    raise ConfigError(
        "state",
        None,
        f"the folder of {str(path)!r} does not exist (searchfuse creates only its "
        "default state folders)",
        f"create {str(parent)!r} first, or point state= (or --state / SEARCHFUSE_STATE) "
        "at a file in an existing folder",
    )


def _is_user_state_dir(folder: Path) -> bool:
    try:
        import platformdirs
    except ImportError:  # pragma: no cover - a dependency
        return False
    return os.path.abspath(folder) == os.path.abspath(platformdirs.user_state_dir("searchfuse"))


def not_state(path: Path, what: str) -> ConfigError:
    """The error for a `state=` path that holds something else; the file is left alone."""
    return ConfigError(
        str(path),
        None,
        f"is not a searchfuse state file ({what}); searchfuse leaves it untouched",
        "point state= (or --state / SEARCHFUSE_STATE) at a new file, for example "
        "state/searchfuse.db",
    )
