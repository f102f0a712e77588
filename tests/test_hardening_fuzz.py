"""train.yaml fuzzed through the real entry point, over 10,000 cases.

Every case goes ``load_config`` → ``render_mpijob`` → ``validate_mpijob`` (the real CRD schema
plus the controller's and Kubernetes' object rules). It either renders a manifest the cluster
would accept, or fails with a ConfigError whose every line is one line naming the problem and
its fix. Never another exception, never more than a few seconds, never 200 MB.

Structured cases mutate a full valid document field by field (valid-looking values, hostile
values, deleted and unknown keys); raw cases are binary, text, YAML-like fragments, byte-level
mutations of a valid file, alias bombs, deep nesting, huge files, duplicate keys, tabs and BOMs.
A sample also goes through ``ci-runner validate`` in a git repository (exit code, one line each).
"""

from __future__ import annotations

import copy
import io
import resource
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci_runner import cli
from ci_runner.config.schema import load_config
from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError
from ci_runner.kube_yaml import manifest_yaml
from ci_runner.render import render_mpijob
from testing.fake_kube.crd import validate_mpijob
from testing.git import run_git
from testing.kubelet_expansion import container_view
from testing.plan_cases import trusted_plan
from testing.reference_schema import EXAMPLE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CTX = CIContext(
    sha="0123456789abcdef0123456789abcdef01234567",
    project_path="group/project",
    project_url="https://gitlab.example.com/group/project",
    pipeline_id="1001",
    job_id="5005",
    ref_name="feature/x",
    repo_url="https://gitlab.example.com/group/project.git",
)
MAX_GROWTH = 200 * 1024 * 1024
FILE = "train.yaml"


def fuzz_settings(examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


class Tally:
    """How many cases ran and how they ended."""

    def __init__(self) -> None:
        self.rendered = 0
        self.refused = 0
        self.slowest = 0.0

    @property
    def total(self) -> int:
        return self.rendered + self.refused


def check_case(data: str | bytes, tally: Tally) -> None:
    """One case through the real pipeline; either an accepted manifest or clean problem lines."""
    started = time.monotonic()
    try:
        config = load_config(data, FILE)
        manifest = render_mpijob(trusted_plan(config, CTX))
    except ConfigError as error:
        lines = error.lines()
        assert lines, "a ConfigError without problems"
        for line in lines:
            assert line.startswith(FILE), line
            assert "\n" not in line and "\r" not in line, line
            assert "; fix: " in line, line
            assert len(line) < 2000, line
        tally.refused += 1
    else:
        problems = validate_mpijob(manifest)
        assert problems == [], (repr(data[:2000]), problems)
        assert isinstance(config, TrainConfig)
        _assert_values_survive(config, manifest)
        if tally.rendered % 50 == 0:  # what `ci-runner render` prints reads back the same
            assert yaml.safe_load(manifest_yaml(manifest)) == manifest
        tally.rendered += 1
    elapsed = time.monotonic() - started
    tally.slowest = max(tally.slowest, elapsed)  # printed; speed itself is bench/'s to measure


def _assert_values_survive(config: TrainConfig, manifest: dict[str, Any]) -> None:
    """User values reach the pods exactly as written: nothing split, re-typed or dropped."""
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    container = next(c for c in launcher["containers"] if c["name"] == "launcher")
    seen = container_view(container, lambda ref: "")  # as the kubelet expands $(VAR) and $$
    env = seen["env"]
    for name, value in config.env:
        if name != "PYTHONPATH":
            assert env[name] == value, (name, value, env.get(name))
    assert seen["args"][-len(config.command) :] == list(config.command)
    assert container["image"] == config.image
    workers = manifest["spec"]["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == config.workers
    assert manifest["spec"]["slotsPerWorker"] == config.slots_per_worker


def run_batch(name: str, test: Callable[[Tally], None], expected: int) -> Tally:
    """Run a hypothesis test (which takes the tally) and check it ran every example."""
    tally = Tally()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    test(tally)
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert tally.total >= expected, (name, tally.total)
    assert growth < MAX_GROWTH, (name, growth)
    print(
        f"{name}: {tally.total} cases, {tally.rendered} rendered, {tally.refused} refused, "
        f"slowest {tally.slowest:.3f}s, peak RSS growth {growth / 2**20:.1f} MiB"
    )
    return tally


# ---------------------------------------------------------------------------------------------
# Structured: a full valid document, mutated field by field.

FULL = yaml.safe_load(EXAMPLE)
FULL["elastic"] = {"min_workers": 1, "max_workers": 4}
FULL["slots_per_worker"] = 1
FULL["kubernetes"].update(
    {"queue": "training", "priority_class": "high", "backoff_limit": 0, "pip_cache_pvc": "pip"}
)
FULL["kubernetes"]["dns_config"]["searches"] = ["svc.cluster.local"]
FULL["kubernetes"]["tolerations"].append(
    {
        "key": "spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoExecute",
        "toleration_seconds": 60,
    }
)
FULL["secrets"] = ["WANDB_API_KEY", "HF_TOKEN"]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, value in children:
        path = (*prefix, key)
        found.append(path)
        found.extend(_paths(value, path))
    return found


PATHS = _paths(FULL)
# Absent optional keys are mutated too (set, never deleted).
PATHS += [("timeout",), ("kubernetes", "ttl_seconds_after_finished"), ("kubernetes", "bogus")]

TEXT = st.text(max_size=40)
HOSTILE_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\n",
        "a\nb",
        "a\tb",
        "\x00",
        "\x1b[31mred",
        "\u2028",
        "\ufeff",
        "'",
        '"',
        "{{ x }}",
        "{% raw %}",
        "$(reboot)",
        "`id`",
        "; rm -rf /",
        "--",
        "-x",
        "*",
        "&anchor",
        "!!python/object:os.system",
        "<script>",
        "x" * 300,
        "ünïcödé",
        "名前",
        "🙂",
        "null",
        "~",
        "true",
        "0x1F",
        "1e400",
        "-0",
        ".nan",
        "12:30",
        "2026-11-30",
    ]
)
ANY_VALUE: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=True, allow_infinity=True),
        TEXT,
        HOSTILE_TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(TEXT, children, max_size=4)
    ),
    max_leaves=12,
)
DNS_LABEL = st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
SUBDOMAIN = st.from_regex(
    r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?(\.[a-z0-9]{1,8}){0,2}", fullmatch=True
)
ENV_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
LABEL = st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?)?", fullmatch=True)
LABEL_KEY = st.one_of(LABEL, st.builds(lambda p, n: f"{p}/{n}", SUBDOMAIN, LABEL))
SMALL_INT = st.integers(min_value=-3, max_value=600)
QUANTITY = st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,3})?(m|k|M|G|Ki|Mi|Gi|Ti)?", fullmatch=True)
DURATION = st.one_of(
    st.integers(min_value=-10, max_value=10**7),
    st.from_regex(r"([0-9]{1,3}d)?([0-9]{1,3}h)?([0-9]{1,3}m)?([0-9]{1,3}s)?", fullmatch=True),
)
URI = st.one_of(
    st.builds(
        lambda bucket, key: f"s3://{bucket}/{key}",
        st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]", fullmatch=True),
        st.sampled_from(["", "runs/", "{project}/{sha}/{job}/", "{{literal}}/", "{branch}/", "{"]),
    ),
    st.builds(lambda path: f"file:///{path}", st.from_regex(r"[a-z/ _.]{0,20}", fullmatch=True)),
)
PATTERN = st.sampled_from(
    [
        r"loss: (?P<value>[-+0-9.eE]+)",
        r"step (?P<step>\d+) loss (?P<value>\S+) rank (?P<rank>\d+)",
        r"(?P<value>.*)",
        r"(?P<other>x)(?P<value>y)",
        r"no value group",
        r"(",
        r"(?P<value>a)" + "(" * 200 + ")" * 200,
        r"(?P<value>(a+)+)$",
    ]
)
TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": LABEL_KEY,
        "operator": st.sampled_from(["Exists", "Equal", "exists", "In"]),
        "value": LABEL,
        "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", "Never"]),
        "toleration_seconds": SMALL_INT,
    },
)
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "name": st.one_of(DNS_LABEL, TEXT),
    "image": st.one_of(st.from_regex(r"[a-z0-9./:@_-]{1,60}", fullmatch=True), TEXT),
    "command": st.one_of(TEXT, st.lists(st.one_of(TEXT, HOSTILE_TEXT, st.integers()), max_size=6)),
    "workers": SMALL_INT,
    "slots_per_worker": SMALL_INT,
    "gpu": SMALL_INT,
    "cpu": st.one_of(QUANTITY, st.integers(min_value=-1, max_value=10**6)),
    "memory": QUANTITY,
    "requirements": st.one_of(st.from_regex(r"[a-z./_ -]{1,30}", fullmatch=True), TEXT),
    "env": st.dictionaries(
        ENV_NAME,
        st.one_of(TEXT, HOSTILE_TEXT, st.integers(), st.floats(allow_nan=False), st.booleans()),
        max_size=6,
    ),
    "secrets": st.lists(ENV_NAME, max_size=4),
    "data": URI,
    "outputs": URI,
    "metrics": st.dictionaries(
        st.one_of(ENV_NAME, TEXT),
        st.fixed_dictionaries(
            {"pattern": PATTERN}, optional={"goal": st.sampled_from(["min", "max", "low"])}
        ),
        max_size=3,
    ),
    "pattern": PATTERN,
    "goal": st.sampled_from(["min", "max", "MAX"]),
    "timeout": DURATION,
    "unschedulable_timeout": DURATION,
    "min_workers": SMALL_INT,
    "max_workers": SMALL_INT,
    "namespace": st.one_of(DNS_LABEL, TEXT),
    "tolerations": st.lists(TOLERATION, max_size=3),
    "node_selector": st.dictionaries(
        LABEL_KEY, st.one_of(LABEL, st.booleans(), st.integers()), max_size=4
    ),
    "nameservers": st.lists(st.one_of(st.ip_addresses().map(str), TEXT), max_size=4),
    "searches": st.lists(SUBDOMAIN, max_size=3),
    "options": st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["ndots", "timeout", "a b"])},
            optional={"value": st.one_of(st.integers(), DNS_LABEL)},
        ),
        max_size=3,
    ),
    "service_account": st.one_of(SUBDOMAIN, TEXT),
    "priority_class": st.one_of(SUBDOMAIN, TEXT),
    "queue": st.one_of(SUBDOMAIN, TEXT),
    "pip_cache_pvc": st.one_of(SUBDOMAIN, TEXT),
    "image_pull_secrets": st.lists(SUBDOMAIN, max_size=3),
    "ttl_seconds_after_finished": st.one_of(SMALL_INT, st.integers()),
    "backoff_limit": st.one_of(SMALL_INT, st.integers()),
    "key": LABEL_KEY,
    "operator": st.sampled_from(["Exists", "Equal"]),
    "value": st.one_of(LABEL, TEXT),
    "effect": st.sampled_from(["NoSchedule", "NoExecute", "Sometimes"]),
    "toleration_seconds": SMALL_INT,
}


def _value_for(path: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    named = [part for part in path if isinstance(part, str)]
    plausible = PLAUSIBLE.get(named[-1]) if named else None
    if isinstance(path[-1], int):  # a list item: the list's own item kind
        parent = named[-1] if named else ""
        plausible = {
            "tolerations": TOLERATION,
            "secrets": ENV_NAME,
            "image_pull_secrets": SUBDOMAIN,
            "nameservers": st.ip_addresses().map(str),
            "searches": SUBDOMAIN,
        }.get(parent)
    if plausible is None:
        return ANY_VALUE
    return st.one_of(plausible, plausible, ANY_VALUE)  # mostly plausible, so many cases render


def _mutate(document: dict[str, Any], data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(PATHS))
        target: Any = document
        try:
            for part in path[:-1]:
                target = target[part]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced a parent
        last = path[-1]
        action = data.draw(st.sampled_from(["set", "set", "set", "delete", "unknown"]))
        if action == "delete" and isinstance(target, (dict, list)):
            if isinstance(target, dict):
                target.pop(last, None)
            elif isinstance(last, int) and last < len(target):
                del target[last]
        elif action == "unknown" and isinstance(target, dict):
            target[data.draw(st.one_of(TEXT, st.sampled_from(["nmae", "gpu", "Workers"])))] = (
                data.draw(ANY_VALUE)
            )
        elif isinstance(target, dict) or (
            isinstance(target, list) and isinstance(last, int) and last < len(target)
        ):
            target[last] = data.draw(_value_for(path))


_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _serialise(document: dict[str, Any], data: st.DataObject) -> str | bytes:
    style = data.draw(st.sampled_from(["block", "flow", "quoted", "ascii", "bom", "bytes"]))
    options: dict[str, Any] = {"Dumper": _DUMPER, "allow_unicode": style != "ascii"}
    if style == "flow":
        options.update(default_flow_style=True, width=80)
    elif style == "quoted":
        options["default_style"] = '"'
    else:
        options["sort_keys"] = False
    text: str = yaml.dump(document, **options)
    if style == "bom":
        return "\ufeff" + text
    if style == "bytes":
        return text.encode("utf-8")
    return text


STRUCTURED_CASES = 2200


def test_structured_mutations_of_a_valid_document() -> None:
    @fuzz_settings(STRUCTURED_CASES)
    @given(st.data())
    def case(tally: Tally, data: st.DataObject) -> None:
        document = copy.deepcopy(FULL)
        _mutate(document, data)
        check_case(_serialise(document, data), tally)

    tally = run_batch("structured", lambda t: case(t), STRUCTURED_CASES)
    # The mix reaches both ends: many documents render, many are refused.
    assert tally.rendered > STRUCTURED_CASES // 10
    assert tally.refused > STRUCTURED_CASES // 10


def test_the_base_document_renders() -> None:
    tally = Tally()
    check_case(yaml.safe_dump(FULL), tally)
    assert tally.rendered == 1


# ---------------------------------------------------------------------------------------------
# Raw: bytes and text of every kind.

VALID_SMALL = (
    "name: fuzz\nimage: horovod/horovod:0.28.1\ncommand: python train.py --lr 0.1\n"
    "workers: 2\nenv:\n  A: 1\n  B: 'x y'\nkubernetes:\n  namespace: ml\n"
    "  tolerations:\n    - {key: gpu, operator: Exists}\n"
)
YAML_PIECES = st.sampled_from(
    [
        "name: a\n",
        "image: b\n",
        "command: c\n",
        "workers: 2\n",
        "env:\n",
        "  X: 1\n",
        "kubernetes:\n",
        "  namespace: ml\n",
        "\t",
        "\ufeff",
        "\x00",
        "\x85",
        "\u2028",
        "\xff",
        "---\n",
        "...\n",
        "&a ",
        "*a",
        "<<: *a\n",
        "? ",
        ": ",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ",",
        "'",
        '"',
        "|\n",
        ">-\n",
        "!!int ",
        "!!binary ",
        "!!python/object ",
        "!custom ",
        "%YAML 1.2\n",
        "%TAG ! tag:x,2000:\n",
        "#",
        "\\",
        "\r\n",
        "\r",
        " ",
        "  ",
        "\n",
        "name: a\n",
        "0o17",
        "0x_",
        "1_000",
        "1e9999",
        ".inf",
        "-.nan",
        "~",
        "2026-01-01",
        "12:34:56",
        "yes",
        "on",
        "NO",
        "\U0001f600",
    ]
)


@st.composite
def byte_mutations(draw: st.DrawFn) -> bytes:
    """A valid train.yaml with a few bytes inserted, deleted, replaced or lines duplicated."""
    data = bytearray(VALID_SMALL.encode())
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        position = draw(st.integers(min_value=0, max_value=len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "duplicate-line", "special"]))
        if kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del data[position : position + draw(st.integers(min_value=1, max_value=8))]
        elif kind == "replace" and position < len(data):
            data[position] = draw(st.integers(min_value=0, max_value=255))
        elif kind == "duplicate-line":
            lines = bytes(data).split(b"\n")
            index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines.insert(index, lines[index])
            data = bytearray(b"\n".join(lines))
        else:
            special = draw(
                st.sampled_from([b"\t", b"\xef\xbb\xbf", b"\xff\xfe", b"\xc3", b"\x00", b"\r"])
            )
            data[position:position] = special
    return bytes(data)


RAW_STRATEGIES: dict[str, tuple[st.SearchStrategy[Any], int]] = {
    "binary": (st.binary(max_size=3000), 2500),
    "text": (st.text(max_size=3000), 2500),
    "yaml-like": (st.lists(YAML_PIECES, max_size=80).map("".join), 2500),
    "byte-mutations": (byte_mutations(), 1500),
}


@pytest.mark.parametrize("kind", list(RAW_STRATEGIES))
def test_raw_input(kind: str) -> None:
    strategy, examples = RAW_STRATEGIES[kind]

    @fuzz_settings(examples)
    @given(strategy)
    def case(tally: Tally, data: str | bytes) -> None:
        check_case(data, tally)

    tally = run_batch(kind, lambda t: case(t), examples)
    if kind == "byte-mutations":
        assert tally.rendered > 0  # some mutations (in a value, a comment) still make a job


# ---------------------------------------------------------------------------------------------
# Hostile shapes: alias bombs, nesting, size, duplicates; with memory measured by tracemalloc.


@st.composite
def hostile_documents(draw: st.DrawFn) -> str | bytes:
    kind = draw(
        st.sampled_from(
            [
                "laughs",
                "wide-alias",
                "recursive",
                "deep",
                "huge",
                "many-keys",
                "duplicates",
                "long-scalar",
                "tabs",
                "long-line",
                "merge-bomb",
            ]
        )
    )
    if kind == "laughs":
        levels = draw(st.integers(min_value=2, max_value=12))
        width = draw(st.integers(min_value=2, max_value=12))
        lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
        for level in range(1, levels):
            refs = ", ".join([f"*a{level - 1}"] * width)
            lines.append(f"a{level}: &a{level} [{refs}]")
        return VALID_SMALL + "\n".join(lines) + "\n"
    if kind == "wide-alias":
        count = draw(st.integers(min_value=1, max_value=400))
        return VALID_SMALL + "x: &x {a: [1, 2, 3]}\ny: [" + ", ".join(["*x"] * count) + "]\n"
    if kind == "recursive":
        return VALID_SMALL + draw(st.sampled_from(["r: &r [*r]\n", "r: &r {k: *r}\n"]))
    if kind == "deep":
        depth = draw(st.integers(min_value=10, max_value=5000))
        style = draw(st.sampled_from(["[", "{a: ", "- "]))
        if style == "- ":
            body = "".join("  " * i + "-\n" for i in range(min(depth, 300)))
            return "x:\n" + body
        close = "]" if style == "[" else "}"
        return "x: " + style * depth + "1" + close * depth * draw(st.integers(0, 1)) + "\n"
    if kind == "huge":
        size = draw(st.sampled_from([1024 * 1024 - 200, 1024 * 1024 + 1, 3 * 1024 * 1024]))
        return VALID_SMALL + "# " + "x" * size + "\n"
    if kind == "many-keys":
        count = draw(st.integers(min_value=100, max_value=12_000))
        return VALID_SMALL + "env2:\n" + "".join(f"  K{i}: {i}\n" for i in range(count))
    if kind == "duplicates":
        count = draw(st.integers(min_value=2, max_value=500))
        return VALID_SMALL + "workers: 3\n" * count
    if kind == "long-scalar":
        size = draw(st.sampled_from([5_000, 100_000, 900_000]))
        field = draw(st.sampled_from(["name", "image", "command", "env: {X", "timeout"]))
        close = "}" if field.startswith("env") else ""
        text = VALID_SMALL.replace("name: fuzz\n", "").replace(
            "image: horovod/horovod:0.28.1\n", ""
        )
        text = text.replace("command: python train.py --lr 0.1\n", "").replace(
            "env:\n  A: 1\n  B: 'x y'\n", ""
        )
        base = "name: fuzz\nimage: img\ncommand: python t.py\n" + text
        base = "\n".join(
            line for line in base.splitlines() if not line.startswith(field.split(":")[0] + ":")
        )
        return base + f"\n{field}: {'9' * size}{close}\n"
    if kind == "tabs":
        return VALID_SMALL.replace("  ", draw(st.sampled_from(["\t", " \t", "\t "])))
    if kind == "long-line":
        return VALID_SMALL + "command: [" + ", ".join(["x"] * draw(st.integers(1, 9000))) + "]\n"
    return VALID_SMALL + "b: &b {a: 1}\n" + "".join(f"m{i}: {{<<: *b}}\n" for i in range(200))


HOSTILE_CASES = 250


def test_hostile_shapes_stay_fast_and_small() -> None:
    @fuzz_settings(HOSTILE_CASES)
    @given(hostile_documents())
    def case(tally: Tally, data: str | bytes) -> None:
        check_case(data, tally)

    tally = run_batch("hostile", lambda t: case(t), HOSTILE_CASES)
    assert tally.refused > HOSTILE_CASES // 2


WORST = [
    VALID_SMALL + "# " + "x" * (1024 * 1024 - 300) + "\n",  # just under the size limit
    VALID_SMALL + "# " + "x" * (3 * 1024 * 1024) + "\n",  # over it
    "x: " + "[" * 100_000,
    "x:\n" + "".join("  " * i + "-\n" for i in range(300)),
    VALID_SMALL + "env2:\n" + "".join(f"  K{i}: {i}\n" for i in range(12_000)),
    VALID_SMALL + "x: &x {a: [1, 2, 3]}\ny: [" + ", ".join(["*x"] * 100) + "]\n",
    "name: fuzz\nimage: img\ncommand: c\nenv: {X: " + "9" * 900_000 + "}\n",
    "name: fuzz\nimage: img\ncommand: [" + ", ".join(["x"] * 9000) + "]\n",
]


def test_worst_shapes_stay_under_200_mb_by_tracemalloc() -> None:
    tally = Tally()
    tracemalloc.start()
    try:
        # No wall-clock bound here (speed is measured under bench/); pytest-timeout still ends a
        # parse that never finishes.
        for text in WORST + [_laughs_document(levels, 10) for levels in (3, 5, 9)]:
            try:
                load_config(text)
            except ConfigError as error:
                assert all("\n" not in line and "; fix: " in line for line in error.lines())
                tally.refused += 1
            else:
                tally.rendered += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"worst shapes: {tally.total} cases, tracemalloc peak {peak / 2**20:.1f} MiB")
    assert peak < MAX_GROWTH


def _laughs(first: str, levels: int, width: int = 10) -> str:
    """``l0`` repeats ``*first`` ``width`` times, each next level repeats the previous one."""
    lines = []
    for level in range(levels):
        ref = first if level == 0 else f"l{level - 1}"
        lines.append(f"l{level}: &l{level} [{', '.join(['*' + ref] * width)}]\n")
    return "".join(lines)


def _laughs_document(levels: int, width: int) -> str:
    return "a: &a [" + ", ".join(["lol"] * width) + "]\n" + _laughs("a", levels, width)


@pytest.mark.parametrize(
    "text",
    [
        # The classic billion laughs, and the same bomb hidden beside a real job.
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + _laughs("a", 9),
        VALID_SMALL.replace("  A: 1\n", "  A: &a [x, x, x, x, x, x, x, x, x, x]\n")
        + _laughs("a", 9),
    ],
    ids=["billion-laughs", "bomb-beside-a-job"],
)
def test_alias_bombs_are_refused_within_memory(text: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as caught:
            load_config(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 1024 * 1024
    assert len(caught.value.lines()) == 1
    assert "aliases" in caught.value.lines()[0]


# ---------------------------------------------------------------------------------------------
# A sample through `ci-runner validate` in a git repository.

CLI_SAMPLES: list[bytes] = [
    VALID_SMALL.encode(),
    ("\ufeff" + VALID_SMALL).encode(),
    VALID_SMALL.replace("  ", "\t").encode(),
    VALID_SMALL.encode() + b"workers: 3\n",
    VALID_SMALL.encode().replace(b"fuzz", b"f\xffzz"),
    VALID_SMALL.encode("utf-16"),
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    b"",
    b"---\n",
    b"- a\n- b\n",
    (VALID_SMALL + "x: &x [1]\n" + "y: [" + ", ".join(["*x"] * 150) + "]\n").encode(),
    ("x: " + "[" * 5000).encode(),
    (VALID_SMALL + "# " + "x" * (1024 * 1024) + "\n").encode(),
    VALID_SMALL.replace("workers: 2", "workers: 0").replace("ml", "ML").encode(),
    VALID_SMALL.replace("workers: 2", "workers: 64\nslots_per_worker: 8").encode(),
    VALID_SMALL.replace("B: 'x y'", 'B: "line\\nbreak \\u2028 \\t tab"').encode(),
    VALID_SMALL.replace("fuzz", "Ünïcödé").encode(),
    (VALID_SMALL + "env2: !!python/object/apply:os.system ['id']\n").encode(),
    VALID_SMALL.replace("name: fuzz", "name: fuzz\nname: other").encode(),
    (VALID_SMALL + "metrics:\n  loss: {pattern: '(?P<value>' }\n").encode(),
    VALID_SMALL.replace("\n", "\r\n").encode(),
    VALID_SMALL.replace("\n", "\r").encode(),
]


def test_validate_command_on_a_sample(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run_git(["init", "-q", "-b", "main"], repo)
    run_git(["remote", "add", "origin", "https://gitlab.example.com/g/p.git"], repo)
    for index, data in enumerate(CLI_SAMPLES):
        (repo / f"train-{index}.yaml").write_bytes(data)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "samples"], repo)
    outcomes = []
    for index, data in enumerate(CLI_SAMPLES):
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(
            ["validate", "--config", f"train-{index}.yaml"],
            env={},
            cwd=repo,
            stdout=out,
            stderr=err,
            crash_dir=tmp_path / "crash",
        )
        try:
            load_config(data, f"train-{index}.yaml")
            expected = 0
        except ConfigError:
            expected = 1
        assert code == expected, (index, err.getvalue())
        if code == 0:
            assert err.getvalue() == ""
            assert out.getvalue().startswith(f"[ci-runner] train-{index}.yaml at ")
            assert out.getvalue().count("\n") == 1
        else:
            assert out.getvalue() == ""
            lines = err.getvalue().splitlines()
            assert lines and all(
                line.startswith(f"ci-runner: error: train-{index}.yaml") and "; fix: " in line
                for line in lines
            ), (index, lines)
        outcomes.append(code)
    assert not (tmp_path / "crash").exists()
    assert outcomes.count(0) >= 5 and outcomes.count(1) >= 10


def test_allow_dirty_with_a_non_utf8_train_yaml_is_one_line(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run_git(["init", "-q", "-b", "main"], repo)
    (repo / "train.yaml").write_text(VALID_SMALL)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "valid"], repo)
    (repo / "train.yaml").write_bytes(VALID_SMALL.encode().replace(b"fuzz", b"f\xffzz"))
    out, err = io.StringIO(), io.StringIO()

    code = cli.main(
        ["train", "--local", "--allow-dirty"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=repo,
        stdout=out,
        stderr=err,
        crash_dir=tmp_path / "crash",
    )

    assert (code, out.getvalue()) == (1, "")
    assert err.getvalue() == (
        "ci-runner: error: train.yaml:1: is not UTF-8 text (byte 0xff cannot be decoded); "
        "fix: save the file with UTF-8 encoding\n"
    )
