"""The pip of ``horovod/horovod:0.28.1``: the image pins ``pip~=21.0.0`` after get-pip
(docker/horovod/Dockerfile, v0.28.1). ``python -m testing.emulated_cluster.stockpip``
(``make cluster-tools``) downloads it once; :mod:`.nodeimages` puts it in the variant image that
has the stock image's Python."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

STOCK_PIP = "pip==21.0.1"
STOCK_PIP_WHEEL = "pip-21.0.1-py3-none-any.whl"
STOCK_PIP_SHA256 = "37fd50e056e2aed635dec96594606f0286640489b0db0ce7607f7e51890372d5"


def stock_pip_wheel(cache: Path) -> Path:
    """The stock image's pip (:data:`STOCK_PIP`), which ``make cluster-tools`` downloads into
    ``cache``; raises FileNotFoundError naming the command when it is not there."""
    wheel = cache / "stock-image" / STOCK_PIP_WHEEL
    if not wheel.is_file():
        raise FileNotFoundError(f"{wheel} is missing; fix: make cluster-tools")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != STOCK_PIP_SHA256:
        raise ValueError(f"{wheel} has sha256 {digest}, not PyPI's {STOCK_PIP_SHA256}")
    return wheel


def fetch_stock_pip(cache: Path) -> Path:
    """Download :data:`STOCK_PIP` from the package index this machine's pip uses into
    ``cache`` (once), checked against PyPI's sha256."""
    try:
        return stock_pip_wheel(cache)
    except FileNotFoundError:
        pass
    folder = cache / "stock-image"
    folder.mkdir(parents=True, exist_ok=True)
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder)]
    options = ["--disable-pip-version-check", "--only-binary", ":all:"]
    subprocess.run([*download, *options, STOCK_PIP], check=True)
    return stock_pip_wheel(cache)


if __name__ == "__main__":
    from testing.paths import cache_dir

    print(f"[stock pip] {fetch_stock_pip(cache_dir())}")
