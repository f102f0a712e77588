"""Kubernetes objects as YAML that ``kubectl apply -f`` reads back exactly as written, and that
people read: multi-line strings (the pod scripts) as literal blocks, short lists and named items
on one line, and every string a YAML 1.2 reader would take for another type quoted."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import yaml
from yaml.representer import SafeRepresenter

try:  # libyaml's emitter: the pure-Python one took 40 ms of `ci-runner render`
    from yaml import CSafeDumper as _SafeDumper
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]

# A list of scalars (an argv: mpirun's options and the job's command) this short is written on
# one line, and a named item of scalars (an env variable, a volume mount) this short too.
FLOW_LIST_CHARS: Final = 200
FLOW_ITEM_CHARS: Final = 100
# Plain scalars a YAML 1.2 reader may take for a number, a boolean or null, where PyYAML (YAML
# 1.1) would write them unquoted: kubectl's (sigs.k8s.io/yaml, go-yaml) reads 1e3, 0o17, 0b1 and
# 1_000 as numbers and yes/on as booleans. Every string that starts like a number, or is one of
# those words, is quoted.
_NOT_PLAIN: Final = re.compile(
    r"[-+]?\.?[0-9].*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|~|"
    r"(?:null|true|false|yes|no|on|off|y|n)|(?:Null|True|False|Yes|No|On|Off|Y|N)|"
    r"(?:NULL|TRUE|FALSE|YES|NO|ON|OFF)"
)


def manifest_yaml(manifest: Mapping[str, Any]) -> str:
    """``manifest`` as YAML for ``kubectl apply -f``; multi-line strings as literal blocks."""
    return yaml.dump(
        dict(manifest), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30
    )


class _Dumper(_SafeDumper):
    pass


def _represent_str(dumper: SafeRepresenter, value: str) -> yaml.Node:
    if "\n" in value:
        style: str | None = "|"  # PyYAML falls back to quoting when | cannot hold it
    else:
        style = "'" if _NOT_PLAIN.fullmatch(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_list(dumper: SafeRepresenter, value: list[Any]) -> yaml.Node:
    # A short list of one-line scalars on one line: [/bin/sh, /ci-runner-scripts/launch.sh].
    short = all(isinstance(item, (str, int)) and "\n" not in str(item) for item in value)
    flow = bool(value) and short and len(", ".join(map(str, value))) <= FLOW_LIST_CHARS
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


def _represent_dict(dumper: SafeRepresenter, value: dict[Any, Any]) -> yaml.Node:
    # A short named item of one-line scalars on one line: {name: ci-runner, mountPath: /ci-runner}.
    flow = (
        "name" in value
        and all(isinstance(item, (str, int)) and "\n" not in str(item) for item in value.values())
        and len(", ".join(f"{k}: {v}" for k, v in value.items())) <= FLOW_ITEM_CHARS
    )
    node = dumper.represent_mapping("tag:yaml.org,2002:map", value)
    node.flow_style = flow
    return node


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)
