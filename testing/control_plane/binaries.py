"""Where the control plane's binaries are: the directory ``scripts/setup-control-plane.sh
--bin-dir`` names for this checkout's Go modules."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testing.paths import REPO_ROOT

SETUP = REPO_ROOT / "scripts" / "setup-control-plane.sh"


class NotBuilt(Exception):
    """The binaries for this checkout are not in the cache."""


def bin_dir() -> Path:
    """The directory with the binaries; :class:`NotBuilt` (the script's line) if missing."""
    done = subprocess.run([str(SETUP), "--bin-dir"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NotBuilt(done.stderr.strip() or "scripts/setup-control-plane.sh --bin-dir failed")
    return Path(done.stdout.strip())


def built() -> bool:
    try:
        bin_dir()
    except NotBuilt:
        return False
    return True
