"""ci_runner.kube_yaml: objects written as YAML kubectl reads back as written, short lists and
named items on one line, scripts as literal blocks."""

from __future__ import annotations

import pytest
import yaml

from ci_runner.kube_yaml import FLOW_LIST_CHARS, manifest_yaml


@pytest.mark.parametrize(
    "value", ["1e-4", "1e3", "0o17", "0x1", "0b1", "1_000", ".inf", "-.5", "yes", "on", "null", "~"]
)
def test_strings_a_yaml_1_2_reader_would_take_for_numbers_are_quoted(value: str) -> None:
    text = manifest_yaml({"env": [{"name": "X", "value": value}], "args": [value, "plain"]})
    assert text == f"env:\n- {{name: X, value: '{value}'}}\nargs: ['{value}', plain]\n"


def test_short_lists_and_named_items_take_one_line_and_scripts_a_block() -> None:
    long_args = ["x" * (FLOW_LIST_CHARS + 1)]
    manifest = {
        "command": ["/bin/sh", "-c"],
        "args": long_args,
        "volumeMounts": [{"name": "code", "mountPath": "/ci-runner"}],
        "script": "#!/bin/sh\nexit 0\n",
    }

    text = manifest_yaml(manifest)

    assert text == (
        "command: [/bin/sh, -c]\n"
        f"args:\n- {long_args[0]}\n"
        "volumeMounts:\n- {name: code, mountPath: /ci-runner}\n"
        "script: |\n  #!/bin/sh\n  exit 0\n"
    )
    assert yaml.safe_load(text) == manifest
