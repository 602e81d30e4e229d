"""The public API as a type checker sees it: the README's router example and a typing sample
pass ``mypy --strict``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mypy_strict(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,  # the project's warm .mypy_cache
        timeout=240,
        check=False,
    )


def test_the_readme_router_example_passes_mypy_strict(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    (example,) = [block for block in blocks if "Router.from_env()" in block]
    path = tmp_path / "readme_router_example.py"
    path.write_text(example, encoding="utf-8")

    checked = _mypy_strict(path)

    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_typing_sample_passes_mypy_strict() -> None:
    # assert_type() lines in the sample pin what the overloads promise:
    # on_refusal="return" -> the tool's type or str, guard_state() visible, methods bound.
    checked = _mypy_strict(ROOT / "tests" / "typing_samples" / "guarded.py")

    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_wrong_expectation_fails_the_check(tmp_path: Path) -> None:
    # The check above can fail: the same sample with one wrong promise does.
    sample = (ROOT / "tests" / "typing_samples" / "guarded.py").read_text(encoding="utf-8")
    wrong = sample.replace(
        'assert_type(returning("q"), dict[str, Any] | str)',
        'assert_type(returning("q"), dict[str, Any])',
    )
    assert wrong != sample
    path = tmp_path / "wrong.py"
    path.write_text(wrong, encoding="utf-8")

    checked = _mypy_strict(path)

    assert checked.returncode == 1
    assert "assert-type" in checked.stdout
