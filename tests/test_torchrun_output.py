"""ci_runner.torchrun_output: the prefix template and what real torchrun (torch 2.13.0) wrote with
it (tests/data/torchrun/, made by its capture.sh)."""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from ci_runner.torchrun_output import (
    EXCEPTHOOK_PREFIX,
    LINE_PREFIX,
    PREFIX_TEMPLATE_VARIABLE,
    REPORT_EXITCODE,
    REPORT_FIELD,
    ROOT_CAUSE_HEADING,
    TEE_BOTH,
    TORCHRUN_ENVIRONMENT,
    TORCHRUN_PREFIX_TEMPLATE,
)

FIXTURES = Path(__file__).resolve().parent / "data" / "torchrun"


def fixture(name: str) -> list[str]:
    return (FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines()


def test_the_template_makes_the_prefix_the_lines_have() -> None:
    assert TORCHRUN_PREFIX_TEMPLATE == "[${rank}]<std>:"
    # torchrun substitutes rank, local_rank and role_name (safe_substitute).
    assert Template(TORCHRUN_PREFIX_TEMPLATE).substitute(rank=3) == "[3]<std>:"
    assert TEE_BOTH == "3"
    assert PREFIX_TEMPLATE_VARIABLE == "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
    assert dict(TORCHRUN_ENVIRONMENT) == {PREFIX_TEMPLATE_VARIABLE: "[${rank}]<std>:"}
    assert LINE_PREFIX.match("[12]<std>:x") is not None
    assert LINE_PREFIX.match("[12]<std>:x").group(1) == "12"  # type: ignore[union-attr]
    for line in ("[1]<stdout>:x", "[rank1]: x", "[1,2]<std>:x", " [1]<std>:x", "[x]<std>:"):
        assert LINE_PREFIX.match(line) is None, line


def test_real_torchrun_tees_both_streams_with_the_prefix() -> None:
    lines = fixture("ok")
    ranked = [line for line in lines if LINE_PREFIX.match(line)]
    # stdout's and stderr's lines of both ranks, each with its rank's prefix; torchrun's own
    # banner (OMP_NUM_THREADS, on stderr) has none.
    assert ranked == [
        "[0]<std>:step 0 loss 1.0000",
        "[0]<std>:rank 0 warns at step 0",
        "[1]<std>:step 0 loss 0.5000",
        "[1]<std>:rank 1 warns at step 0",
        "[0]<std>:step 1 loss 0.5000",
        "[0]<std>:rank 0 warns at step 1",
        "[1]<std>:step 1 loss 0.3333",
        "[1]<std>:rank 1 warns at step 1",
    ]
    assert len(lines) - len(ranked) == 4


def test_the_report_and_the_excepthook_as_real_torchrun_wrote_them() -> None:
    lines = fixture("killed")
    assert lines.count(ROOT_CAUSE_HEADING) == 1
    root = lines[lines.index(ROOT_CAUSE_HEADING) :]
    fields = {m["name"]: m["value"] for line in root if (m := REPORT_FIELD.fullmatch(line))}
    assert fields["rank"] == "1 (local_rank: 1)"
    assert fields["error_file"] == "<N/A>"
    code = REPORT_EXITCODE.match(fields["exitcode"])
    assert code is not None
    assert (code["code"], code["signal"]) == ("-9", "SIGKILL")
    assert re.fullmatch(r"Signal 9 \(SIGKILL\) received by PID [0-9]+", fields["traceback"])
    hooked = [line for line in fixture("raise") if line.startswith("[1]<std>:[rank1]: ")]
    assert hooked[-1] == "[1]<std>:[rank1]: ValueError: boom at 0.5"
    assert EXCEPTHOOK_PREFIX.match("[rank1]: ValueError: boom at 0.5") is not None
