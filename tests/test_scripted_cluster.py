"""The scripted cluster itself: its nodes are real node agents of kube-apiserver (the node's
own user, a Lease), kube-apiserver proxies pods/log to a node on loopback, the node's log server
lets only the API server's kubelet client in, and a stop leaves nothing. And every test that runs
on it says why it is scripted rather than run on the real nodes (a fast check of the sources)."""

from __future__ import annotations

import ast
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import requests

from testing.host import network
from testing.scripted_cluster import leftovers
from testing.scripted_cluster.cluster import ScriptedCluster, module_cluster


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedCluster]:
    yield from module_cluster(tmp_path_factory.mktemp("scripted-logs"))


@pytest.mark.control_plane
def test_nodes_register_as_their_own_user_and_hold_a_lease(scripted: ScriptedCluster) -> None:
    """Scripted: a test of the scripted node agent itself (the real nodes' counterpart is
    test_the_nodes_are_kubelet_v1_35_4_on_containerd_shaped_by_system_reserved)."""
    admin = scripted.plane.plane.admin_api()
    node = admin.get("/api/v1/nodes/node-1")
    assert node is not None
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.1"}
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    lease = admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1")
    assert lease is not None and lease["spec"]["holderIdentity"] == "node-1"
    # NodeRestriction: a node may not touch another node.
    assert scripted.kubelet is not None
    own = scripted.kubelet.nodes["node-1"].api
    with pytest.raises(Exception, match="403"):
        own.merge_patch("/api/v1/nodes/node-2", {"metadata": {"labels": {"x": "y"}}})


def _get(scripted: ScriptedCluster, cert: tuple[str, str] | None) -> requests.Response:
    assert scripted.kubelet is not None
    plane = scripted.plane.plane
    port = scripted.kubelet.nodes["node-1"].logs.port
    return requests.get(
        f"https://127.0.0.1:{port}/containerLogs/default/p/c",
        verify=str(plane.ca),
        cert=cert,
        timeout=10,
    )


@pytest.mark.control_plane
def test_the_node_log_server_refuses_other_clients(scripted: ScriptedCluster) -> None:
    """Scripted: a test of the scripted kubelet's log server itself (a real kubelet checks its
    clients on its own)."""
    plane = scripted.plane.plane
    someone = plane.client_certificate("someone", ("developers",))
    answer = _get(scripted, (str(someone.cert), str(someone.key)))
    assert (answer.status_code, answer.text) == (
        403,
        "Forbidden (user=someone, verb=get, resource=nodes, subresource(s)=[proxy])\n",
    )
    assert (_get(scripted, None).status_code, _get(scripted, None).text) == (401, "Unauthorized")
    client = plane.pki_dir / "apiserver-kubelet-client"
    allowed = _get(scripted, (f"{client}.crt", f"{client}.key"))
    assert (allowed.status_code, allowed.text) == (404, 'pod "p/default" does not exist\n')


@pytest.mark.control_plane
def test_a_stop_leaves_nothing_and_a_start_removes_a_dead_runs_leftovers(tmp_path: Path) -> None:
    """Scripted: a test of the scripted cluster's own start and stop."""
    # A killed run's leftovers: a namespace and a state directory of a pid that is gone.
    dead = "999999999-1"
    network.ip("netns", "add", f"cirs-{dead}-mpiop")
    (Path(tempfile.gettempdir()) / f"ci-runner-scripted-{dead}-x").mkdir()
    scripted = ScriptedCluster(tmp_path).start()
    run = scripted.plane.names.run
    assert leftovers.inventory(dead) == {"processes": [], "cgroups": [], "netns": [], "state": []}
    assert leftovers.inventory(run)["netns"] == [f"cirs-{run}-mpiop"]
    assert len(leftovers.inventory(run)["processes"]) == 5  # etcd, 3 of Kubernetes, operator
    scripted.stop()
    assert leftovers.inventory(run) == {"processes": [], "cgroups": [], "netns": [], "state": []}


# -- every scripted test says why it is scripted ----------------------------------------------

TESTS = Path(__file__).parent
MARK = "control_plane"  # pyproject: starts the scripted cluster's real control plane
STARTS = {"module_cluster", "ScriptedCluster"}  # testing.scripted_cluster.cluster's starters
SAYS_WHY = "Scripted: "

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _fixtures(tree: ast.Module) -> dict[str, Function]:
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, Function)
        and any(_dotted(d) in ("pytest.fixture", "fixture") for d in node.decorator_list)
    }


def _requested(func: Function, decorators: Iterable[ast.expr] = ()) -> set[str]:
    """The fixtures ``func`` takes as arguments or through ``pytest.mark.usefixtures``."""
    args = func.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    for decorator in [*func.decorator_list, *decorators]:
        if isinstance(decorator, ast.Call) and _dotted(decorator).endswith(".usefixtures"):
            names |= {str(a.value) for a in decorator.args if isinstance(a, ast.Constant)}
    return names


def _starts(func: Function) -> bool:
    return any(
        isinstance(node, ast.Call) and _dotted(node).rsplit(".", 1)[-1] in STARTS
        for node in ast.walk(func)
    )


def _scripted_fixtures(layers: list[dict[str, Function]]) -> set[str]:
    """The fixture names that give a test the scripted cluster (a fixture that starts one, or
    takes such a fixture), each later layer (conftest, then the module) overriding the earlier."""
    scripted: set[str] = set()
    for layer in layers:
        inherited, scripted = scripted, scripted - set(layer)
        grown = True
        while grown:
            grown = False
            for name, func in layer.items():
                if name not in scripted and (
                    _starts(func)
                    or any(
                        a in scripted or (a == name and a in inherited) for a in _requested(func)
                    )
                ):
                    scripted.add(name)
                    grown = True
    return scripted


def _marked(decorators: Iterable[ast.expr], aliases: set[str]) -> bool:
    return any(
        _dotted(d) == f"pytest.mark.{MARK}" or (isinstance(d, ast.Name) and d.id in aliases)
        for d in decorators
    )


def scripted_tests(module: str, conftest: str = "") -> dict[str, Function]:
    """The tests of ``module`` (its source) that run on the scripted cluster: marked
    ``control_plane`` (itself, its class, the module's ``pytestmark``, or a name bound to the
    mark), taking a fixture that gives the scripted cluster (``conftest``'s or its own), or
    starting one."""
    tree = ast.parse(module)
    fixtures = _scripted_fixtures([_fixtures(ast.parse(conftest)), _fixtures(tree)])
    aliases: set[str] = set()
    module_marks: list[ast.expr] = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else []
            if "pytestmark" in names:
                module_marks = values or [node.value]
            elif _dotted(node.value) == f"pytest.mark.{MARK}":
                aliases |= names
    tests: list[tuple[str, Function, list[ast.expr]]] = []
    for node in tree.body:
        if isinstance(node, Function):
            tests.append((node.name, node, module_marks))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            tests += [
                (f"{node.name}::{f.name}", f, [*module_marks, *node.decorator_list])
                for f in node.body
                if isinstance(f, Function)
            ]
    return {
        name: func
        for name, func, marks in tests
        if func.name.startswith("test")
        and (
            _marked([*marks, *func.decorator_list], aliases)
            or _requested(func, marks) & fixtures
            or _starts(func)
        )
    }


def says_why(func: Function) -> bool:
    """A paragraph of its docstring starts ``Scripted: ``."""
    paragraphs = (ast.get_docstring(func) or "").split("\n\n")
    return any(p.startswith(SAYS_WHY) for p in paragraphs)


def test_every_test_on_the_scripted_cluster_says_why_it_is_not_on_the_real_nodes() -> None:
    """The issue: the scripted cluster keeps only what a real node here cannot do, each case
    saying why (docs/developing.md): a ``Scripted: <why>`` paragraph in each one's docstring."""
    conftest = (TESTS / "conftest.py").read_text()
    found = {
        f"{path.name}::{name}": func
        for path in sorted(TESTS.glob("test_*.py"))
        for name, func in scripted_tests(path.read_text(), conftest).items()
    }
    assert f"{Path(__file__).name}::test_the_node_log_server_refuses_other_clients" in found
    silent = [name for name, func in found.items() if not says_why(func)]
    assert silent == [], (
        "tests on the scripted cluster with no 'Scripted: <why>' paragraph in their "
        "docstring:\n  " + "\n  ".join(silent)
    )


SCRIPTED_CONFTEST = """
@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    yield from module_cluster(tmp_path_factory.mktemp("x"))

@pytest.fixture
def cluster(scripted, tmp_path):
    with cluster_on(scripted, tmp_path) as cluster:
        yield cluster

@pytest.fixture
def pipeline(cluster):
    yield cluster
"""


def test_the_rule_finds_scripted_tests_by_mark_fixture_or_start_and_no_others() -> None:
    module = """
on_it = pytest.mark.control_plane

@pytest.fixture
def cluster(tmp_path):  # overrides conftest's: not scripted
    return tmp_path

@pytest.fixture
def piped(pipeline):
    return pipeline

@on_it
def test_by_alias(): ...

@pytest.mark.control_plane
def test_by_mark(): ...

def test_by_a_fixture(piped): ...

@pytest.mark.usefixtures("scripted")
def test_by_usefixtures(): ...

def test_by_start(tmp_path):
    ScriptedCluster(tmp_path).start()

class TestOnIt:
    def test_in_a_class(self, pipeline): ...

def test_on_its_own_cluster(cluster): ...

def test_pure(): ...

@pytest.mark.slow
def test_slow(): ...
"""
    assert sorted(scripted_tests(module, SCRIPTED_CONFTEST)) == [
        "TestOnIt::test_in_a_class",
        "test_by_a_fixture",
        "test_by_alias",
        "test_by_mark",
        "test_by_start",
        "test_by_usefixtures",
    ]
    marked = "pytestmark = [pytest.mark.slow, pytest.mark.control_plane]\ndef test_a(): ...\n"
    assert list(scripted_tests(marked)) == ["test_a"]
