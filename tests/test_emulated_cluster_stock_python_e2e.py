"""`ci-runner train` with the stock image's Python (Ubuntu 20.04's 3.8 shape: ``python`` only,
no ensurepip, pip 21.0.1) on the emulated cluster's own nodes, which alone have that variant
(testing/emulated_cluster/image.py); the real nodes' images have Debian's Python (slow)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testing.emulated_cluster.image import STOCK_PIP, STOCK_PYTHON_IMAGE
from testing.emulated_pipeline import Site, assert_trained, running_site, train, train_yaml

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("stock-python"), real=False) as running:
        yield running


# The commit's package: what the rank's Python sees (the virtualenv install-requirements.sh made)
# and what the image's PATH has without it.
STOCK_CHECK = """\
import importlib.metadata, importlib.util, os, shutil, sys


def main():
    image_path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not d.startswith(sys.prefix)
    )
    print(
        "stockpkg", importlib.metadata.version("stockpkg"), "in", sys.prefix,
        "rank", os.environ["OMPI_COMM_WORLD_RANK"],
        "pip", importlib.metadata.version("pip"),
        "ensurepip", importlib.util.find_spec("ensurepip"),
        "python3", shutil.which("python3", path=image_path),
        flush=True,
    )
"""


def test_the_stock_images_python_branch_installs_a_local_package_with_its_old_pip(
    site: Site,
) -> None:
    # The variant image has `python` only (no python3), no ensurepip and pip 21.0.1, as
    # horovod/horovod:0.28.1: install-requirements.sh takes `command -v python`, makes the
    # virtualenv --without-pip and runs the image's pip through the system site packages, which
    # builds the commit's setup.py-only package (pip's legacy, pre-PEP 517 path).
    config = train_yaml()
    config["image"] = STOCK_PYTHON_IMAGE
    config["requirements"] = "requirements.txt"
    config["command"] = "sh -c 'stock-check && exec python examples/simple_ml/main_with_horovod.py'"
    setup = (
        "from setuptools import setup\n\n"
        "setup(name='stockpkg', version='1.0', py_modules=['stockpkg'],\n"
        "      entry_points={'console_scripts': ['stock-check = stockpkg:main']})\n"
    )
    files = {
        "requirements.txt": b"-r examples/simple_ml/requirements.txt\n./libs/stockpkg\n",
        "libs/stockpkg/setup.py": setup.encode(),
        "libs/stockpkg/stockpkg.py": STOCK_CHECK.encode(),
    }
    run = train(site, "stock", config, files)
    assert_trained(run, "stock")
    version = STOCK_PIP.split("==")[1]
    assert sorted(line for line in run.log if "stockpkg" in line) == [
        f"[1,{rank}]<stdout>:stockpkg 1.0 in /ci-runner/venv rank {rank} pip {version} "
        "ensurepip None python3 None"
        for rank in (0, 1)
    ], "\n".join(run.log)
