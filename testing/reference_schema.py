"""The ``train.yaml`` reference (``docs/train-yaml.md``), generated from the schema.

:func:`testing.reference_ranks.train_yaml_reference` adds what every rank sees to it;
``python -m testing.reference_docs`` writes the file, and a test keeps it equal to theirs.

In testing/, beside the generator, not in ci_runner/: only the generator and tests use it.
"""

from __future__ import annotations

from typing import Final

from ci_runner.config.engine import ListOf, MapOf, Record, Values
from ci_runner.config.schema import SCHEMA

EXAMPLE: Final = r"""name: simple-ml
image: horovod/horovod:0.28.1
command: python examples/simple_ml/main_with_horovod.py
workers: 2
resources: {gpu: 1, cpu: "4", memory: 8Gi}
requirements: examples/simple_ml/requirements.txt
env:
  EPOCHS: 10
  LOG_LEVEL: info
secrets: [WANDB_API_KEY]
data: s3://datasets/diabetes/
outputs: s3://models/{project}/{sha}/{job}/
metrics:
  train_loss:
    pattern: 'Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+)'
    goal: min
  test_loss:
    pattern: 'Testing\. MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)'
timeout: 2h
kubernetes:
  namespace: ml-training
  tolerations:
    - {key: gpu, operator: Exists, effect: NoSchedule}
  node_selector: {gpu-type: a100}
  dns_config:
    nameservers: [10.105.222.6]
    options: [{name: ndots, value: "2"}]
  service_account: trainer
  image_pull_secrets: [registry-credentials]
  pip_cache_pvc: pip-cache
  pip_cache_access_mode: ReadWriteMany
  cluster_domain: cluster.local
  ssh_port: 22
  ttl_seconds_after_finished: 3600
  setup_timeout: 45m
  unschedulable_timeout: 10m
  on_preemption: wait
"""

_INTRO: Final = """\
# `train.yaml` reference

`train.yaml` at the root of your repository describes one distributed training job. ci-runner
reads it from the exact commit being built (`git show <sha>:train.yaml`), checks it against the
schema below and reports every mistake at once, each with its line, what is wrong and how to fix
it; nothing runs until the file is valid. Check it yourself with `ci-runner validate`.

Only `name`, `image` and `command` are required. Every rank sees `env`, `secrets` and
ci-runner's own variables, such as `DATA_URI` and `OUTPUT_URI`: [What every rank
sees](#what-every-rank-sees) lists them, and what the setup containers get. A manual pipeline
run may override `workers` with the variable `CI_RUNNER_WORKERS` and append arguments to
`command` with `CI_RUNNER_ARGS` (split like a shell command line); an empty variable changes
nothing.

This file is generated from the schema in `ci_runner/config/schema.py` and the code that sets
the ranks' variables by `python -m testing.reference_docs`; a test keeps them equal.

## Example

```yaml
"""


_FORMATS: Final = """
## Value formats

- **duration**: whole seconds (`600`) or a number with units `d`, `h`, `m`, `s` in that order
  (`90s`, `30m`, `2h`, `1h30m`, `7d`); more than 0 and at most 7 days.
- **quantity**: a Kubernetes quantity: a number with an optional suffix `m` (thousandths), `k`,
  `M`, `G`, `T`, `P`, `E` or `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei` (`4`, `500m`, `8Gi`).
- **URI**: `s3://bucket/key/...` or `file:///absolute/path/`. In `outputs`, `{project}` (the
  GitLab project path), `{sha}` (the full commit SHA) and `{job}` (the name ci-runner gives the
  training job) are filled in; `{{` and `}}` stand for literal braces.
- **names** (`secrets`, `env` keys, metric names): letters, digits and `_`, not starting with a
  digit; `DATA_URI`, `OUTPUT_URI`, `PIP_CACHE_DIR`, `GIT_USERNAME`, `GIT_PASSWORD` and
  `CI_RUNNER_*` are reserved for ci-runner.
- Kubernetes names (`service_account`, `priority_class`, `image_pull_secrets`, `queue`,
  `pip_cache_pvc`): lowercase letters, digits, `-` and `.`; `namespace`: lowercase letters,
  digits and `-`.
"""


def schema_markdown() -> str:
    """The train.yaml reference (``docs/train-yaml.md``), generated from :data:`SCHEMA`."""
    lines = [
        _INTRO + EXAMPLE + "```",
        "",
        "## Fields",
        "",
        "| Field | Type | Default | Description |",
        "| --- | --- | --- | --- |",
    ]
    lines.extend(_rows(SCHEMA, ""))
    return "\n".join(lines) + "\n" + _FORMATS


def _rows(record: Record[Values, object], prefix: str) -> list[str]:
    rows: list[str] = []
    for spec in record.fields:
        path = prefix + spec.key
        kind = spec.kind
        default = "required" if spec.required else (spec.default or "—")
        description = f"{spec.description} Example: `{spec.key}: {spec.example}`"
        rows.append(f"| `{path}` | {kind.doc} | {default} | {_cell(description)} |")
        if isinstance(kind, Record):
            rows.extend(_rows(kind, path + "."))
        elif isinstance(kind, ListOf) and isinstance(kind.item, Record):
            rows.extend(_rows(kind.item, path + "[]."))
        elif isinstance(kind, MapOf) and isinstance(kind.value, Record):
            rows.extend(_rows(kind.value, path + ".<name>."))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
