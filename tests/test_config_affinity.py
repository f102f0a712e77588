"""ci_runner.config.affinity: ``kubernetes.launcher.affinity``, through the schema."""

from __future__ import annotations

import json

from ci_runner.config.schema import load_config
from testing.config_cases import BASE, problems

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
AFFINITY = BASE + (
    "kubernetes:\n"
    "  launcher:\n"
    "    affinity:\n"
    "      podAntiAffinity:\n"
    f"        {PREFERRED}:\n"
    "          - weight: {weight}\n"
    "            podAffinityTerm:\n"
    "              topologyKey: kubernetes.io/hostname\n"
    "              labelSelector: {{matchLabels: {{app: {app}}}}}\n"
)
PATH = f"kubernetes.launcher.affinity.podAntiAffinity.{PREFERRED}[0]"


def test_numbers_json_cannot_hold_are_refused_each_where_it_is() -> None:
    assert problems(AFFINITY.format(weight=".nan", app="-.Inf")) == [
        f"train.yaml:9: {PATH}.weight: is .nan, a number Kubernetes cannot read (JSON has no "
        "NaN or infinity); fix: write a finite number, or quote it ('.nan') if you mean the text",
        f"train.yaml:12: {PATH}.podAffinityTerm.labelSelector.matchLabels.app: is -.Inf, a "
        "number Kubernetes cannot read (JSON has no NaN or infinity); fix: write a finite "
        "number, or quote it ('-.Inf') if you mean the text",
    ]


def test_finite_numbers_and_quoted_words_are_kept() -> None:
    affinity = load_config(AFFINITY.format(weight="50", app="'.nan'")).kubernetes.launcher.affinity
    assert affinity is not None
    term = json.loads(affinity)["podAntiAffinity"][PREFERRED][0]
    assert term["weight"] == 50
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"app": ".nan"}}
