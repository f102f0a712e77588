"""The example's DDP version is its Horovod version with only the distributed parts changed: the
same job settings, data, network, metric lines and model file, and no Horovod anywhere.

(The real training of both: tests/test_local_e2e.py and tests/test_local_ddp_e2e.py.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from testing.paths import EXAMPLE, REPO_ROOT

HOROVOD = REPO_ROOT / EXAMPLE / "main_with_horovod.py"
DDP = REPO_ROOT / EXAMPLE / "main_with_ddp.py"
# What a Horovod script and its DDP version share, word for word.
SHARED = ("load_table", "split", "shard", "build_model", "DATA_FILE", "MODEL_FILE", "SEED")


def _definitions(path: Path) -> dict[str, str]:
    """Each top-level function and constant of ``path``, as its AST (no comments, no layout)."""
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = ast.dump(node)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.dump(node)
    return found


def _printed_lines(path: Path) -> list[str]:
    """The f-strings the script prints its metric lines with."""
    return [
        ast.dump(node)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.JoinedStr)
        and any(
            isinstance(part, ast.Constant) and str(part.value).startswith(("Training.", "Testing."))
            for part in node.values
        )
    ]


def test_the_ddp_job_is_the_horovod_job_started_by_torchrun() -> None:
    horovod = yaml.safe_load((REPO_ROOT / EXAMPLE / "train.yaml").read_text(encoding="utf-8"))
    ddp = yaml.safe_load((REPO_ROOT / EXAMPLE / "train-ddp.yaml").read_text(encoding="utf-8"))

    assert ddp.pop("distributed") == "torchrun"
    assert ddp.pop("command") == f"python {EXAMPLE}/main_with_ddp.py"
    assert horovod.pop("command") == f"python {EXAMPLE}/main_with_horovod.py"
    assert (ddp.pop("name"), horovod.pop("name")) == ("simple-ml-ddp", "simple-ml")
    assert ddp == horovod


def test_the_ddp_script_shares_the_data_the_network_and_the_lines() -> None:
    horovod, ddp = _definitions(HOROVOD), _definitions(DDP)

    assert {name: ddp.get(name) for name in SHARED} == {name: horovod[name] for name in SHARED}
    assert _printed_lines(DDP) == _printed_lines(HOROVOD)
    assert len(_printed_lines(DDP)) == 2


def test_the_ddp_script_needs_no_horovod() -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(DDP.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])

    assert "horovod" not in imported
    assert {"torch", "numpy", "uri_io"} <= imported


def _torch_pins(script: str) -> list[str]:
    text = (REPO_ROOT / "scripts" / script).read_text(encoding="utf-8")
    return re.findall(r'^TORCH_VERSION="([^"]+)"', text, re.MULTILINE)


def test_torch_alone_is_the_torch_horovod_is_built_against() -> None:
    """One pin, in the helpers both setup scripts source; neither pins its own."""
    assert _torch_pins("lib/setup.sh") == ["2.13.0"]
    for script in ("setup-torch.sh", "setup-horovod.sh"):
        text = (REPO_ROOT / "scripts" / script).read_text(encoding="utf-8")
        assert '. "$(dirname "$0")/lib/setup.sh"' in text, script
        assert _torch_pins(script) == [], script
