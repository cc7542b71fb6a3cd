"""The layering of STYLE.md §1, as the import-linter contracts in pyproject.toml state it."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_import_contracts_are_kept() -> None:
    """A layer importing upwards, or dagchain importing I/O, fails here with the linter's report."""
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"lint-imports failed:\n{result.stdout}\n{result.stderr}"


def test_importing_dagchain_loads_no_event_loop_or_web_stack() -> None:
    """Unlike lint-imports, this also sees what dagchain's libraries import (a fresh interpreter).

    threading is not checked here: coincurve imports it. lint-imports forbids dagchain's own use.
    """
    code = (
        "import sys, dagchain, dagchain.storage\n"
        "unwanted = {'asyncio', 'aiohttp', 'uvloop', 'pydantic'}\n"
        "print(' '.join(sorted(unwanted & set(sys.modules))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == ""
