"""The package as `make dist` builds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testing.paths import REPO_ROOT


def build_wheel(outdir: Path) -> Path:
    """``python -m build --wheel`` of the checkout, as `make dist` runs it."""
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = outdir.glob("*.whl")
    return wheel
