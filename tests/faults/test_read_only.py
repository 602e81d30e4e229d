"""`status` and `diagnose` on state this user may not write: a service's state folder, a
read-only file. They only read, so they work, read-only, and say what they could not
do; state this user cannot even read is named with its owner (exit 2, no traceback).

Each command runs as its own process, as another user would run it: under root
(which writes anywhere) with the capabilities that bypass file modes dropped
(`setpriv`) and the state owned by `nobody`; otherwise with the modes taken away.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from searchfuse import NoKeyAvailable, Router
from searchfuse.testing import FakeTavily

GOOD, REJECTED = "tvly-dev-test0001", "tvly-dev-test0002"
NOBODY = 65534
ROOT = os.geteuid() == 0
SETPRIV = shutil.which("setpriv")
# Root keeps its uid but loses the rights that ignore file modes.
AS_ANOTHER_USER = (
    [SETPRIV, "--bounding-set=-dac_override,-dac_read_search,-fowner"] if ROOT and SETPRIV else []
)

pytestmark = pytest.mark.skipif(
    ROOT and not SETPRIV, reason="needs setpriv to run without root's file rights"
)


@pytest.fixture
def served() -> Iterator[tuple[FakeTavily, str]]:
    fake = FakeTavily((GOOD,))  # the other key is rejected (401)
    with fake.serve() as url:
        yield fake, url


def _project(tmp_path: Path, name: str, url: str) -> Path:
    """A project whose state (`state/<name>`) holds a running auth cooldown: the
    second key was rejected just now, on this machine's clock."""
    (tmp_path / "config").mkdir()
    keys = tmp_path / "config" / "keys.json"
    keys.write_text(json.dumps({"format_version": 2, "keys": [{"key": GOOD}, {"key": REJECTED}]}))
    keys.chmod(0o600)
    state = tmp_path / "state" / name
    state.parent.mkdir()
    with pytest.raises(NoKeyAvailable):
        Router([REJECTED], state=state, base_url=url, clock=time.time).search("q")
    Router.from_config(keys, state=state, base_url=url, clock=time.time).search("q")
    return state


def _not_ours(state: Path, *, readable: bool) -> None:
    """Make `state` and its folder another user's (or, as a user, read-only)."""
    folder = state.parent
    mode = 0o644 if readable else 0o600
    for path in folder.iterdir():
        path.chmod(mode if ROOT else (0o444 if readable else 0o000))
    if ROOT:
        for path in (folder, *folder.iterdir()):
            os.chown(path, NOBODY, NOBODY)
        folder.chmod(0o755)
    else:
        folder.chmod(0o555)


def _snapshot(folder: Path) -> dict[str, tuple[bytes, float]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime) for p in sorted(folder.iterdir())}


def _cli(tmp_path: Path, url: str, state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCHFUSE_")}
    env["TAVILY_BASE_URL"] = url
    return subprocess.run(
        [*AS_ANOTHER_USER, sys.executable, "-m", "searchfuse", "--state", str(state), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def restore(tmp_path: Path) -> Iterator[None]:
    yield
    if not ROOT:  # let pytest remove what it made
        for path in tmp_path.rglob("*"):
            path.chmod(0o700)


@pytest.mark.parametrize("name", ["searchfuse.db", "quota.json"])
def test_status_and_diagnose_read_state_they_cannot_write(
    name: str, tmp_path: Path, served: tuple[FakeTavily, str], restore: None
) -> None:
    fake, url = served
    state = _project(tmp_path, name, url)
    _not_ours(state, readable=True)
    before = _snapshot(state.parent)

    shown = _cli(tmp_path, url, state, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    by_key = {r["key"][-4:]: r for r in json.loads(shown.stdout)}
    assert by_key["0001"]["state"] == "available"
    assert by_key["0002"]["state"] == "cooling" and by_key["0002"]["cooldown_reason"] == "auth"
    assert f"note: {state} cannot be written" in shown.stderr
    assert "writes nothing back" in shown.stderr and "Traceback" not in shown.stderr

    fake.reset_records()
    probed = _cli(tmp_path, url, state, "diagnose", "--probe", "--json")
    assert probed.returncode == 0, probed.stderr  # one key serves: healthy
    assert json.loads(probed.stdout)["verdict"] == "healthy"
    assert "what the probe learns is not saved" in probed.stderr
    # Each key was probed once: the command saw it could not write before it asked.
    assert len(fake.usage_requests) == 2

    assert _snapshot(state.parent) == before  # nothing written, nothing added


@pytest.mark.parametrize("name", ["searchfuse.db", "quota.json"])
def test_state_this_user_cannot_read_is_named_with_its_owner(
    name: str, tmp_path: Path, served: tuple[FakeTavily, str], restore: None
) -> None:
    _, url = served
    state = _project(tmp_path, name, url)
    _not_ours(state, readable=False)
    for argv in (["status"], ["diagnose", "--json"]):
        done = _cli(tmp_path, url, state, *argv)
        assert done.returncode == 2
        assert f"cannot read the router state at {state} (permission denied: it belongs to" in (
            done.stderr
        )
        assert "run the command as the user who owns it" in done.stderr
        assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["error"] == "usage"


def test_a_private_copy_made_while_a_writer_checkpoints_is_one_whole_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database and its WAL are copied one after the other. A checkpoint
    between the two (the WAL's changes moved into the database, the WAL started
    again) would pair a database without those changes with a WAL that no longer
    holds them: the copy would show the state of up to `CHECKPOINT_EVERY`
    commits ago for every record written only then."""
    import sqlite3

    from searchfuse import _readonly
    from searchfuse.router.state import SqliteStore

    now = 1_768_478_400.0
    path = tmp_path / "searchfuse.db"
    store = SqliteStore(path)
    for i in range(40):  # many records: they fill more than one page
        store.update(now, lambda s, i=i: setattr(s.key(f"fp{i:03d}"), "last_error", "x" * 200))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def count(s: Any) -> None:
        s.key("fp000").searches += 1

    for _ in range(30):  # only in the WAL
        store.update(now, count)
    copies: list[str] = []
    real = shutil.copyfile

    def copy_then_write(source: Any, target: Any) -> Any:
        out = real(source, target)
        copies.append(str(source))
        if len(copies) == 1:  # the database copied, its WAL not yet: a writer checkpoints
            with sqlite3.connect(path) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            store.update(now, lambda s: setattr(s.key("fp039"), "searches", 5))
        return out

    monkeypatch.setattr(_readonly.shutil, "copyfile", copy_then_write)
    folder = tmp_path / "copy"
    folder.mkdir()
    copy = _readonly.private_copy(path, folder)
    state = SqliteStore(copy).read(now)
    assert state.keys["fp000"].searches == 30
    assert state.keys["fp039"].searches in (0, 5)
    store.close()
