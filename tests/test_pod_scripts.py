"""The shell scripts the pods run (templates/scripts/*.sh), run for real with /bin/sh.

A local bare repository stands in for GitLab, a local wheelhouse for the package index, and a
loopback socket for sshd. The scripts run exactly as rendered into the MPIJob where it matters.
"""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.render import pod_scripts, render_mpijob
from testing.git import GIT_ENV, run_git
from testing.git_http import GitHttp, git_http
from testing.kubelet_expansion import container_view
from testing.plan_cases import trusted_plan
from testing.ports import free_port

# The ConfigMap's files (render.pod_scripts), as the pods mount them: the module fixture below
# writes them here.
SCRIPTS = Path()
VENV_BIN = Path(sys.executable).parent
TOKEN = "glcbt-canary-7f3a9c1e5b"


HTTPS_REMOTE = "https://gitlab.example.com/g/p.git"


def _sh_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
        "CI_RUNNER_CODE_DIR": str(tmp_path / "pod" / "code"),
        "CI_RUNNER_VENV": str(tmp_path / "pod" / "venv"),
        "CI_RUNNER_SSH_DIR": str(tmp_path / "pod" / "ssh"),
        "CI_RUNNER_READY_FILE": str(tmp_path / "pod" / "ready"),
        # fetch-code leaves no uv there (CI_RUNNER_UV empty): pip installs, unless a test says.
        "CI_RUNNER_UV": "",
        **GIT_ENV,
    }
    (tmp_path / "home").mkdir(parents=True, exist_ok=True)
    env.update(extra)
    return env


@pytest.fixture(scope="module", autouse=True)
def _configmap_files(tmp_path_factory: pytest.TempPathFactory) -> None:
    global SCRIPTS
    SCRIPTS = tmp_path_factory.mktemp("ci-runner-scripts")
    for name, text in pod_scripts().items():
        (SCRIPTS / name).write_text(text, encoding="utf-8")


def run_script(name: str, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", str(SCRIPTS / name), *args],
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture
def remote(tmp_path: Path) -> tuple[str, str, str]:
    """A bare repository (file:// URL) whose main moved on: (url, old sha, new sha)."""
    src = tmp_path / "src"
    src.mkdir()
    run_git(["init", "-q", "-b", "main"], src)
    (src / "train.py").write_text("print('old')\n")
    (src / "requirements.txt").write_text("tinypkg==1.0\n")
    (src / "broken-requirements.txt").write_text("no-such-package-anywhere==9.9\n")
    run_git(["add", "-A"], src)
    run_git(["commit", "-q", "-m", "old"], src)
    old = run_git(["rev-parse", "HEAD"], src)
    (src / "train.py").write_text("print('new')\n")
    run_git(["commit", "-q", "-am", "new"], src)
    new = run_git(["rev-parse", "HEAD"], src)
    bare = tmp_path / "remote.git"
    run_git(["clone", "-q", "--bare", str(src), str(bare)], tmp_path)
    return f"file://{bare}", old, new


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with one wheel, tinypkg 1.0, built here from a two-file project."""
    root = tmp_path_factory.mktemp("tinypkg")
    project = root / "tinypkg"
    (project / "tinypkg").mkdir(parents=True)
    (project / "tinypkg" / "__init__.py").write_text("VALUE = 'from the wheel'\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinypkg"\nversion = "1.0"\n'
    )
    wheels = root / "wheels"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-index", "--no-deps"),
            *("--no-build-isolation", "-w", str(wheels), str(project)),
        ],
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert [p.name for p in wheels.iterdir()] == ["tinypkg-1.0-py3-none-any.whl"]
    return wheels


# fetch-code.sh


def test_fetch_checks_out_exactly_the_sha_after_the_branch_moved_on(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    url, old, _new = remote
    env = _sh_env(tmp_path, CI_RUNNER_REPO_URL=url, CI_RUNNER_SHA=old)
    proc = run_script("fetch-code.sh", env)
    code = tmp_path / "pod" / "code"
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == f"ci-runner: code at commit {old} in {code}\n"
    assert run_git(["rev-parse", "HEAD"], code) == old
    assert (code / "train.py").read_text() == "print('old')\n"
    assert run_git(["rev-parse", "--is-shallow-repository"], code) == "true"


def test_fetch_of_a_sha_the_remote_does_not_have_fails_with_one_line(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    url, _old, _new = remote
    missing = "0123456789abcdef0123456789abcdef01234567"
    proc = run_script(
        "fetch-code.sh", _sh_env(tmp_path, CI_RUNNER_REPO_URL=url, CI_RUNNER_SHA=missing)
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    # git's own reason, in parentheses, is worded differently by transport and version.
    assert re.fullmatch(
        f"ci-runner: cannot fetch commit {missing} from {re.escape(url)} "
        rf"\(fatal: [^\n]*not our ref {missing}\); fix: push the commit, and check that the CI "
        r"job token \(or CI_RUNNER_GIT_TOKEN\) can read the repository\n",
        proc.stderr,
    )


@pytest.mark.parametrize("sha", ["", "HEAD", "abc123", "g" * 40, "A" * 40])
def test_fetch_refuses_anything_but_a_full_sha(tmp_path: Path, sha: str) -> None:
    env = _sh_env(tmp_path, CI_RUNNER_REPO_URL="file:///nowhere", CI_RUNNER_SHA=sha)
    proc = run_script("fetch-code.sh", env)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"ci-runner: CI_RUNNER_SHA '{sha}' is not a full commit SHA; fix: render the job with "
        "ci-runner\n"
    )


def _credentials(tmp_path: Path, user: str = "gitlab-ci-token", token: str = TOKEN) -> Path:
    """The job Secret's git keys as the kubelet mounts them in fetch-code: files of mode 0400."""
    directory = tmp_path / "secret-volume"
    directory.mkdir()
    for name, value in (("username", user), ("password", token)):
        (directory / name).write_text(value)
        (directory / name).chmod(0o400)
    return directory


def _token_traces(*roots: Path) -> list[str]:
    """Every file under ``roots`` that holds TOKEN (or its base64, as an Authorization header)."""
    needles = [TOKEN.encode(), base64.b64encode(f"gitlab-ci-token:{TOKEN}".encode())]
    found = []
    for root in roots:
        for path in [root, *root.rglob("*")] if root.exists() else []:
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found += [str(path) for needle in needles if needle in data]
    return found


@pytest.fixture
def authenticated(tmp_path: Path, remote: tuple[str, str, str]) -> Iterator[tuple[GitHttp, str]]:
    """The remote over HTTP, for gitlab-ci-token with TOKEN only: (server, old sha)."""
    url, old, _new = remote
    root = Path(url.removeprefix("file://")).parent
    with git_http(root, "gitlab-ci-token", TOKEN) as server:
        server.url += "/remote.git"
        yield server, old


def test_fetch_gives_git_the_token_from_the_files_through_its_helper_only(
    tmp_path: Path, authenticated: tuple[GitHttp, str]
) -> None:
    server, old = authenticated
    env = _sh_env(
        tmp_path,
        CI_RUNNER_REPO_URL=server.url,
        CI_RUNNER_SHA=old,
        CI_RUNNER_GIT_CREDENTIALS=str(_credentials(tmp_path)),
    )
    proc = run_script("fetch-code.sh", env)
    code = tmp_path / "pod" / "code"
    assert (proc.returncode, proc.stderr) == (0, "")
    assert server.seen and set(server.seen) == {f"gitlab-ci-token:{TOKEN}"}
    assert run_git(["rev-parse", "HEAD"], code) == old
    assert _token_traces(tmp_path / "pod") == []
    # The checkout keeps no helper: a git run in it later (by a rank) has no way to the files.
    config = (code / ".git" / "config").read_text()
    assert "credential" not in config and "secret-volume" not in config
    fill = subprocess.run(
        ["git", "credential", "fill"],
        cwd=code,
        env={**env, "GIT_TERMINAL_PROMPT": "0"},
        input="protocol=http\nhost=127.0.0.1\n\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert TOKEN not in fill.stdout and fill.returncode != 0


def test_fetch_without_the_files_is_refused_by_the_server_with_one_line(
    tmp_path: Path, authenticated: tuple[GitHttp, str]
) -> None:
    server, old = authenticated
    env = _sh_env(tmp_path, CI_RUNNER_REPO_URL=server.url, CI_RUNNER_SHA=old)
    proc = run_script("fetch-code.sh", env)
    assert (proc.returncode, proc.stdout, server.seen) == (1, "", [])
    assert proc.stderr == (
        f"ci-runner: cannot fetch commit {old} from {server.url} (fatal: could not read Username "
        f"for '{server.url.rsplit('/', 1)[0]}': terminal prompts disabled); fix: push the "
        "commit, and check that the CI job token (or CI_RUNNER_GIT_TOKEN) can read the "
        "repository\n"
    )


def _hook(shared: Path, credentials: Path) -> str:
    """A command that copies the credential wherever a rank would find it."""
    return (
        f"cat {credentials}/password > {shared}/leak-file; printenv GIT_PASSWORD > "
        f"{shared}/leak-env; printenv > {shared}/leak-all"
    )


ATTACKS: dict[str, Callable[[Path, Path], dict[str, str]]] = {
    "GIT_CONFIG_COUNT core.fsmonitor": lambda shared, creds: {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": _hook(shared, creds) + "; false",
    },
    "GIT_CONFIG_PARAMETERS credential.helper": lambda shared, creds: {
        "GIT_CONFIG_PARAMETERS": f"'credential.helper'='!{_hook(shared, creds)}; :'",
    },
    "GIT_TRACE_CURL unredacted": lambda shared, creds: {
        "GIT_TRACE_CURL": f"{shared}/trace",
        "GIT_TRACE_REDACT": "0",
        "GIT_TRACE": f"{shared}/trace2",
    },
    "GIT_SSH_COMMAND and GIT_ASKPASS": lambda shared, creds: {
        "GIT_SSH_COMMAND": f"sh -c '{_hook(shared, creds)}'",
        "GIT_ASKPASS": str(_script(shared.parent / "askpass", _hook(shared, creds))),
    },
    "GIT_TEMPLATE_DIR post-checkout hook": lambda shared, creds: {
        "GIT_TEMPLATE_DIR": str(_template(shared.parent / "template", _hook(shared, creds))),
    },
    "GIT_EXEC_PATH remote helper": lambda shared, creds: {
        "GIT_EXEC_PATH": str(_exec_path(shared.parent / "exec", _hook(shared, creds))),
    },
    "HOME and XDG_CONFIG_HOME gitconfig": lambda shared, creds: {
        "HOME": str(_gitconfig(shared.parent / "home", _hook(shared, creds))),
        "XDG_CONFIG_HOME": str(shared.parent / "home"),
    },
}


def _script(path: Path, command: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{command}\n")
    path.chmod(0o755)
    return path


def _template(directory: Path, command: str) -> Path:
    _script(directory / "hooks" / "post-checkout", command)
    return directory


def _exec_path(directory: Path, command: str) -> Path:
    """git's own programs, and a git-remote-http that leaks first."""
    real = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True)
    directory.mkdir(parents=True)
    for program in Path(real.stdout.strip()).iterdir():
        (directory / program.name).symlink_to(program)
    (directory / "git-remote-http").unlink()
    _script(
        directory / "git-remote-http", f'{command}\nexec {real.stdout.strip()}/git-remote-http "$@"'
    )
    return directory


def _gitconfig(home: Path, command: str) -> Path:
    (home / "git").mkdir(parents=True)
    hook = f"[core]\n\tfsmonitor = {command}; false\n[credential]\n\thelper = !{command}; :\n"
    (home / ".gitconfig").write_text(hook)
    (home / "git" / "config").write_text(hook)
    return home


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_no_variable_given_to_fetch_puts_the_token_where_a_rank_reads(
    tmp_path: Path, authenticated: tuple[GitHttp, str], attack: str
) -> None:
    server, old = authenticated
    shared = tmp_path / "pod"  # /ci-runner: the volume every rank reads
    shared.mkdir()
    credentials = _credentials(tmp_path)
    env = _sh_env(
        tmp_path,
        CI_RUNNER_REPO_URL=server.url,
        CI_RUNNER_SHA=old,
        CI_RUNNER_GIT_CREDENTIALS=str(credentials),
        # As the pods had them before: the script must not hand them to git either.
        GIT_USERNAME="gitlab-ci-token",
        GIT_PASSWORD=TOKEN,
        **ATTACKS[attack](shared, credentials),
    )
    proc = run_script("fetch-code.sh", env)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert server.seen  # the token went to the server, and only there
    assert _token_traces(shared, tmp_path / "askpass", tmp_path / "home") == []
    assert sorted(p.name for p in shared.iterdir()) == ["code"]


def test_the_rendered_fetch_code_container_keeps_train_yamls_attack_away(
    tmp_path: Path, authenticated: tuple[GitHttp, str]
) -> None:
    """The issue's attack as train.yaml's env, run as the kubelet would run the rendered
    container: its env (Secret references read, $(VAR) expanded) and the Secret volume."""
    server, old = authenticated
    pod_dir = tmp_path / "pod"
    config = TrainConfig(
        name="attack",
        image="img",
        command=("python3", "train.py"),
        env=(
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
            ("GIT_CONFIG_VALUE_0", "printenv GIT_PASSWORD > /ci-runner/leak; false"),
            ("STOLEN", "$(GIT_PASSWORD)"),
        ),
    )
    ctx = CIContext(sha=old, project_path="g/p", job_id="1", repo_url=server.url)
    worker = render_mpijob(trusted_plan(config, ctx))["spec"]["mpiReplicaSpecs"]["Worker"]
    fetch = _container(worker["template"]["spec"], "fetch-code")
    secret = {"GIT_USERNAME": "gitlab-ci-token", "GIT_PASSWORD": TOKEN}
    volume = tmp_path / "secret-volume"
    volume.mkdir()
    for source in worker["template"]["spec"]["volumes"]:
        for item in source.get("secret", {}).get("items", []):
            (volume / item["path"]).write_text(secret[item["key"]])
            (volume / item["path"]).chmod(source["secret"]["defaultMode"])
    proc = _run_in_pod(
        None,
        fetch,
        pod_dir,
        _sh_env(tmp_path),
        secret=secret,
        mounts={"/ci-runner-git": volume},
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert set(server.seen) == {f"gitlab-ci-token:{TOKEN}"}
    assert _token_traces(pod_dir) == []
    assert sorted(p.name for p in pod_dir.iterdir()) == ["code"]


# install-requirements.sh


def _fetched(tmp_path: Path, remote: tuple[str, str, str], **extra: str) -> dict[str, str]:
    url, old, _new = remote
    env = _sh_env(tmp_path, CI_RUNNER_REPO_URL=url, CI_RUNNER_SHA=old, **extra)
    assert run_script("fetch-code.sh", env).returncode == 0
    return env


def _installed(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path, **extra: str
) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    """The code fetched and requirements.txt (tinypkg) installed: the env and the install."""
    env = _fetched(
        tmp_path,
        remote,
        CI_RUNNER_REQUIREMENTS="requirements.txt",
        PIP_FIND_LINKS=str(wheelhouse),
        **extra,
    )
    proc = run_script("install-requirements.sh", env)
    assert proc.returncode == 0, proc.stderr
    return env, proc


def test_install_puts_the_requirements_where_every_rank_imports_them(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    env, proc = _installed(tmp_path, remote, wheelhouse)
    assert proc.stdout.endswith(f"ci-runner: requirements installed; ready at commit {remote[1]}\n")
    assert (tmp_path / "pod" / "ready").read_text() == f"{remote[1]}\n"
    rank = subprocess.run(
        ["python", "-c", "import tinypkg; print(tinypkg.VALUE)"],
        cwd=tmp_path,
        env={**env, "PATH": f"{tmp_path / 'pod' / 'venv' / 'bin'}{os.pathsep}{env['PATH']}"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert rank.stdout == "from the wheel\n"


def test_fetch_leaves_the_setup_images_uv_and_install_runs_it(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    uv = tmp_path / "pod" / "tools" / "uv"
    env, proc = _installed(tmp_path, remote, wheelhouse, CI_RUNNER_UV=str(uv))
    assert uv.read_bytes() == (VENV_BIN / "uv").read_bytes()
    assert os.access(uv, os.X_OK)
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines() == [
        f"ci-runner: installing requirements.txt with uv {version.stdout.split()[1]}",
        f"ci-runner: requirements installed; ready at commit {remote[1]}",
    ]
    assert " + tinypkg==1.0" in proc.stderr.splitlines()
    rank = subprocess.run(
        [
            tmp_path / "pod" / "venv" / "bin" / "python",
            "-c",
            "import tinypkg; print(tinypkg.VALUE)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert rank.stdout == "from the wheel\n"


@pytest.mark.parametrize(("extra", "compiled"), [({}, False), ({"PIP_NO_COMPILE": "1"}, True)])
def test_install_leaves_bytecode_to_the_ranks_unless_train_yaml_says(
    tmp_path: Path,
    remote: tuple[str, str, str],
    wheelhouse: Path,
    extra: dict[str, str],
    compiled: bool,
) -> None:
    # pip's compiling every module it installs costs seconds per large library at every start.
    _installed(tmp_path, remote, wheelhouse, **extra)
    packages = list((tmp_path / "pod" / "venv").glob("lib/python3*/site-packages/tinypkg"))
    assert len(packages) == 1
    assert (packages[0] / "__pycache__").exists() is compiled


def test_install_makes_each_ranks_lines_one_write_even_unbuffered(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    # Under PYTHONUNBUFFERED (the ranks' env), print() writes the text and the newline apart, and
    # mpirun --tag-output can put another rank's line between them.
    env = _fetched(tmp_path, remote)
    assert run_script("install-requirements.sh", env).returncode == 0
    show = (
        "import sys; print([(s.line_buffering, s.write_through) for s in (sys.stdout, sys.stderr)])"
    )

    def streams(python: str) -> str:
        env_u = {**env, "PYTHONUNBUFFERED": "1"}
        done = subprocess.run([python, "-c", show], env=env_u, capture_output=True, text=True)
        return done.stdout

    assert streams(sys.executable) == "[(False, True), (False, True)]\n"  # the image's python
    venv_python = str(tmp_path / "pod" / "venv" / "bin" / "python")
    assert streams(venv_python) == "[(True, False), (True, False)]\n"


def test_install_without_requirements_marks_ready(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    env = _fetched(tmp_path, remote)
    proc = run_script("install-requirements.sh", env)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (tmp_path / "pod" / "ready").read_text() == f"{remote[1]}\n"
    assert (tmp_path / "pod" / "venv" / "bin" / "python").exists()


def test_failing_install_exits_non_zero_and_never_marks_ready(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    env = _fetched(
        tmp_path,
        remote,
        CI_RUNNER_REQUIREMENTS="broken-requirements.txt",
        PIP_FIND_LINKS=str(wheelhouse),
    )
    (tmp_path / "pod" / "ready").write_text("stale\n")
    proc = run_script("install-requirements.sh", env)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        f"ci-runner: pip could not install broken-requirements.txt at commit {remote[1]} (its "
        "output is above); fix: correct the requirements file, or set PIP_INDEX_URL in "
        "train.yaml env"
    )
    assert not (tmp_path / "pod" / "ready").exists()


def test_install_of_a_requirements_file_missing_at_the_commit(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    env = _fetched(tmp_path, remote, CI_RUNNER_REQUIREMENTS="nope.txt")
    proc = run_script("install-requirements.sh", env)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"ci-runner: nope.txt does not exist in commit {remote[1]}; fix: commit it, or correct "
        "'requirements' in train.yaml\n"
    )
    assert not (tmp_path / "pod" / "ready").exists()


def test_install_refuses_code_at_another_commit(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    env = _fetched(tmp_path, remote)
    env["CI_RUNNER_SHA"] = remote[2]
    proc = run_script("install-requirements.sh", env)
    code = tmp_path / "pod" / "code"
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"ci-runner: {code} is at commit {remote[1]}, not {remote[2]}; fix: the fetch-code init "
        "container must run first\n"
    )
    assert not (tmp_path / "pod" / "ready").exists()


def _cached_install(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path, pod: str, **extra: str
) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    """requirements.txt installed in pod ``pod`` with a virtualenv cache in tmp_path/cache; every
    pod's virtualenv is at the same path, as in the pods (/ci-runner/venv)."""
    env = _fetched(
        tmp_path / pod,
        remote,
        CI_RUNNER_REQUIREMENTS="requirements.txt",
        PIP_FIND_LINKS=str(wheelhouse),
        CI_RUNNER_VENV=str(tmp_path / "venv"),
        CI_RUNNER_VENV_CACHE=str(tmp_path / "cache"),
        **extra,
    )
    return env, run_script("install-requirements.sh", env)


def _rank_imports_tinypkg(venv: Path, env: Mapping[str, str]) -> str:
    """What a rank run by ``venv``'s Python prints of tinypkg's VALUE."""
    rank = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tinypkg; print(tinypkg.VALUE)"],
        env=dict(env),
        capture_output=True,
        text=True,
        check=True,
    )
    return rank.stdout


def _cache_entries(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cache").iterdir())


def test_install_keeps_the_virtualenv_for_the_next_pod_with_the_same_requirements(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    _, first = _cached_install(tmp_path, remote, wheelhouse, "pod-1")
    assert (first.returncode, first.stdout.splitlines()[-1]) == (
        0,
        f"ci-runner: requirements installed; ready at commit {remote[1]}",
    )
    (key,) = _cache_entries(tmp_path)
    assert re.fullmatch("[0-9a-f]{32}", key)
    assert (tmp_path / "cache" / key / ".ci-runner-complete").is_file()
    env, second = _cached_install(tmp_path, remote, wheelhouse, "pod-2")
    assert (second.returncode, second.stdout, second.stderr) == (
        0,
        f"ci-runner: requirements from the virtualenv cache ({key}); ready at commit {remote[1]}\n",
        "",
    )
    assert (tmp_path / "venv").resolve() == tmp_path / "cache" / key
    assert (tmp_path / "pod-2" / "pod" / "ready").read_text() == f"{remote[1]}\n"
    assert _rank_imports_tinypkg(tmp_path / "venv", env) == "from the wheel\n"
    # Another pip setting is another virtualenv.
    _, third = _cached_install(tmp_path, remote, wheelhouse, "pod-3", PIP_PRE="1")
    assert third.stdout.endswith(f"requirements installed; ready at commit {remote[1]}\n")
    assert len(_cache_entries(tmp_path)) == 2


def test_uv_makes_the_virtualenv_on_the_claim_with_its_caches_files_linked(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    def pod(name: str) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
        uv = tmp_path / name / "pod" / "tools" / "uv"
        pip_cache = str(tmp_path / "pip")
        return _cached_install(
            tmp_path, remote, wheelhouse, name, CI_RUNNER_UV=str(uv), PIP_CACHE_DIR=pip_cache
        )

    env, first = pod("pod-1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.endswith(f"requirements installed; ready at commit {remote[1]}\n")
    (key,) = _cache_entries(tmp_path)  # made under another name, then renamed
    kept = tmp_path / "cache" / key
    assert os.readlink(tmp_path / "venv") == str(kept)
    assert (kept / ".ci-runner-complete").is_file()
    (module,) = kept.glob("lib/python3*/site-packages/tinypkg/__init__.py")
    assert module.stat().st_nlink == 2  # its other name is in uv's cache
    activate = (kept / "bin" / "activate").read_text()
    assert str(tmp_path / "venv") in activate
    assert f".{key}." not in activate
    assert _rank_imports_tinypkg(tmp_path / "venv", env) == "from the wheel\n"
    _, second = pod("pod-2")
    assert second.stdout == (
        f"ci-runner: requirements from the virtualenv cache ({key}); ready at commit {remote[1]}\n"
    )


def test_pip_after_uv_declined_makes_the_virtualenv_in_the_pod(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    uv = tmp_path / "pod-1" / "pod" / "tools" / "uv"
    _, proc = _cached_install(
        tmp_path, remote, wheelhouse, "pod-1", CI_RUNNER_UV=str(uv), PIP_PREFER_BINARY="1"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == [
        f"ci-runner: installing requirements.txt with uv {_uv_version()}",
        "ci-runner: pip installs requirements.txt: PIP_PREFER_BINARY is a pip setting uv has no "
        "equivalent of",
    ]
    (key,) = _cache_entries(tmp_path)  # the claim's unused one removed, pip's copied there
    assert not (tmp_path / "venv").is_symlink()
    (module,) = (tmp_path / "cache" / key).glob("lib/python3*/site-packages/tinypkg/__init__.py")
    assert module.stat().st_nlink == 1


def _uv_version() -> str:
    done = subprocess.run([VENV_BIN / "uv", "--version"], capture_output=True, text=True)
    return done.stdout.split()[1]


def test_install_keys_the_cache_by_the_files_the_requirements_include(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    env, _ = _cached_install(tmp_path, remote, wheelhouse, "pod-1")
    code = Path(env["CI_RUNNER_CODE_DIR"])
    (code / "base.txt").write_text("tinypkg\n")
    (code / "requirements.txt").write_text("-r base.txt\n")
    assert run_script("install-requirements.sh", env).returncode == 0
    (code / "base.txt").write_text("tinypkg==1.0\n")
    assert run_script("install-requirements.sh", env).returncode == 0
    assert len(_cache_entries(tmp_path)) == 3


@pytest.mark.parametrize(
    "line", ["./libs/pkg", "-e .", "--find-links wheels", "pkg @ file:///tmp/pkg.whl"]
)
def test_install_never_caches_requirements_that_name_a_local_path(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path, line: str
) -> None:
    env = _fetched(
        tmp_path,
        remote,
        CI_RUNNER_REQUIREMENTS="local.txt",
        PIP_FIND_LINKS=str(wheelhouse),
        CI_RUNNER_VENV_CACHE=str(tmp_path / "cache"),
    )
    code = Path(env["CI_RUNNER_CODE_DIR"])
    (code / "wheels").mkdir()
    (code / "local.txt").write_text("-r requirements.txt\n")
    (code / "requirements.txt").write_text(f"tinypkg==1.0  # pinned\n{line}\n")
    proc = run_script("install-requirements.sh", env)
    assert proc.stderr.splitlines()[0] == (
        f"ci-runner: the virtualenv is not cached: local.txt names {line}"
    )
    assert not (tmp_path / "cache").exists()


def test_install_removes_virtualenvs_unused_for_two_weeks(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    cache = tmp_path / "cache"
    for name, days in (("old", 15), ("recent", 13), (".unfinished.pod.1", 15)):
        (cache / name).mkdir(parents=True)
        stamp = time.time() - days * 86400
        if not name.startswith("."):
            (cache / name / ".ci-runner-complete").touch()
            os.utime(cache / name / ".ci-runner-complete", (stamp, stamp))
        os.utime(cache / name, (stamp, stamp))
    _, proc = _cached_install(tmp_path, remote, wheelhouse, "pod-1")
    assert proc.returncode == 0
    assert [n for n in _cache_entries(tmp_path) if len(n) != 32] == ["recent"]


def test_install_with_a_cache_it_cannot_write_still_marks_ready(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path
) -> None:
    (tmp_path / "cache").write_text("a file, not a directory\n")
    _, proc = _cached_install(tmp_path, remote, wheelhouse, "pod-1")
    assert proc.returncode == 0
    assert proc.stderr.splitlines()[-1] == (
        f"ci-runner: could not keep the virtualenv in {tmp_path / 'cache'} (the output is "
        "above); the next start installs again"
    )
    assert proc.stdout.endswith(f"requirements installed; ready at commit {remote[1]}\n")


# ready.sh


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_ready_only_with_the_ready_file_for_this_sha_and_sshd_listening(
    tmp_path: Path, listening_port: int
) -> None:
    sha = "a" * 40
    ready = tmp_path / "pod" / "ready"
    ready.parent.mkdir()
    env = _sh_env(tmp_path, CI_RUNNER_SHA=sha, CI_RUNNER_SSH_PORT=str(listening_port))
    assert run_script("ready.sh", env).returncode == 1  # still setting up
    ready.write_text("b" * 40 + "\n")
    assert run_script("ready.sh", env).returncode == 1  # another commit's marker
    ready.write_text(sha + "\n")
    proc = run_script("ready.sh", env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    closed = {**env, "CI_RUNNER_SSH_PORT": str(free_port())}
    assert run_script("ready.sh", closed).returncode == 1  # sshd not listening


def test_ready_waits_for_sshd_binding_its_port_as_the_container_starts(tmp_path: Path) -> None:
    # The kubelet may probe as the container starts; sshd then listens a moment later.
    sha = "a" * 40
    (tmp_path / "pod").mkdir()
    (tmp_path / "pod" / "ready").write_text(sha + "\n")
    port = free_port()
    env = _sh_env(tmp_path, CI_RUNNER_SHA=sha, CI_RUNNER_SSH_PORT=str(port))
    probe = subprocess.Popen(["/bin/sh", str(SCRIPTS / "ready.sh")], env=env)
    time.sleep(0.5)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sshd:
        sshd.bind(("127.0.0.1", port))
        sshd.listen()
        assert probe.wait(timeout=10) == 0
    # Never listens: fails after its 2 s, 20 waits of 0.1 s (counted by a `sleep` that records).
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "sleep").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "sleeps"}\n')
    (fake_bin / "sleep").chmod(0o755)
    assert (
        run_script("ready.sh", {**env, "PATH": f"{fake_bin}{os.pathsep}{env['PATH']}"}).returncode
        == 1
    )
    assert (tmp_path / "sleeps").read_text().splitlines() == ["0.1"] * 20


# launch.sh

# /proc/net/route of a pod: the cluster's route first, then the default route.
ROUTE_TABLE = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t0000000A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
    "eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
)


def test_launch_names_the_default_route_interface_to_horovodrun(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    env = _fetched(tmp_path, remote)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "horovodrun").write_text('#!/bin/sh\necho "$*"\n')
    (fake_bin / "horovodrun").chmod(0o755)
    routes = tmp_path / "route"
    routes.write_text(ROUTE_TABLE.replace("eth0\t00000000", "net1\t00000000"))
    env = {
        **env,
        "PATH": f"{fake_bin}{os.pathsep}{env['PATH']}",
        "CI_RUNNER_ROUTE_TABLE": str(routes),
    }
    proc = run_script("launch.sh", env, "horovodrun", "-np", "2", "python3", "train.py")
    assert (proc.returncode, proc.stdout) == (
        0,
        "--network-interfaces net1 -np 2 python3 train.py\n",
    )
    # No default route (or another program): the arguments as given; horovodrun discovers.
    routes.write_text(ROUTE_TABLE.splitlines(keepends=True)[0])
    proc = run_script("launch.sh", env, "horovodrun", "-np", "2", "python3", "train.py")
    assert (proc.returncode, proc.stdout) == (0, "-np 2 python3 train.py\n")


def _fake_mpirun(tmp_path: Path) -> Path:
    """A directory whose ``mpirun`` prints its arguments, one a line."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    (fake_bin / "mpirun").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake_bin / "mpirun").chmod(0o755)
    return fake_bin


def test_launch_gives_mpirun_the_interface_and_every_variable_by_name(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    env = _fetched(tmp_path, remote)
    routes = tmp_path / "route"
    routes.write_text(ROUTE_TABLE.replace("eth0\t00000000", "net1\t00000000"))
    env = {
        **env,
        "PATH": f"{_fake_mpirun(tmp_path)}{os.pathsep}{env['PATH']}",
        "CI_RUNNER_ROUTE_TABLE": str(routes),
        "A_SECRET": "hunter2\nLINE=two",  # a value with a line break is still one name
        "OLDPWD": "/",
        "BASH_FUNC_f%%": "() { :; }",
        "CUDA_VISIBLE_DEVICES": "0",
        "NVIDIA_CUDA_VISIBLE_DEVICES": "0",
        "HOROVOD_SECRET_KEY": "k",  # horovodrun's exclusions
    }
    rendered = ["-np", "2", "--hostfile", "/etc/mpi/hostfile", "python3", "-c", "print(1)"]
    proc = run_script("launch.sh", env, "mpirun", *rendered)
    assert (proc.returncode, proc.stderr) == (0, "")
    passed = sorted(
        {*env, "PATH"}
        - {"OLDPWD", "BASH_FUNC_f%%", "CUDA_VISIBLE_DEVICES"}
        - {"NVIDIA_CUDA_VISIBLE_DEVICES", "HOROVOD_SECRET_KEY"}
    )
    names = [arg for name in passed for arg in ("-x", name)]
    wdir = ["-wdir", env["CI_RUNNER_CODE_DIR"]]
    interface = ["-mca", "btl_tcp_if_include", "net1", "-x", "NCCL_SOCKET_IFNAME=net1"]
    assert proc.stdout.splitlines() == [*wdir, *interface, *names, *rendered]
    assert "hunter2" not in proc.stdout
    # No default route: mpirun picks the interfaces itself, every variable still passed.
    routes.write_text(ROUTE_TABLE.splitlines(keepends=True)[0])
    proc = run_script("launch.sh", env, "mpirun", *rendered)
    assert proc.stdout.splitlines() == [*wdir, *names, *rendered]


def test_launch_sshs_through_a_config_of_its_own_with_a_private_copy_of_the_key(
    tmp_path: Path,
) -> None:
    auth = tmp_path / "ci-runner-ssh"
    auth.mkdir()
    (auth / "id_rsa").write_text("KEY\n")
    (auth / "id_rsa").chmod(0o644)  # the operator's mount away from /root/.ssh
    env = _sh_env(
        tmp_path,
        CI_RUNNER_SHA="0" * 40,
        CI_RUNNER_SSH_AUTH=str(auth),
        CI_RUNNER_SSH_PORT="2222",
        CI_RUNNER_SSH_USER="root",
    )
    env["PATH"] = f"{_fake_mpirun(tmp_path)}{os.pathsep}{env['PATH']}"
    proc = run_script("launch.sh", env, "mpirun", "-np", "1", "true")
    assert (proc.returncode, proc.stderr) == (0, "")
    ssh_dir = tmp_path / "pod" / "ssh"
    assert (ssh_dir / "config").read_text().splitlines() == [
        "Port 2222",
        "StrictHostKeyChecking no",
        "UserKnownHostsFile /dev/null",
        "LogLevel ERROR",
        f"IdentityFile {ssh_dir}/id",
        "IdentitiesOnly yes",
        "User root",
    ]
    assert (ssh_dir / "id").read_text() == "KEY\n"
    assert (ssh_dir / "id").stat().st_mode & 0o777 == 0o600
    wrapper = (ssh_dir / "bin" / "ssh").read_text().splitlines()
    assert wrapper[1].endswith(f'ssh -F {ssh_dir}/config "$@"')
    assert "CI_RUNNER_SSH_USER" not in proc.stdout.splitlines()  # not passed to the ranks


def test_launch_gives_mpirun_a_shell_when_the_user_has_none_and_no_rank_gets_it(
    tmp_path: Path,
) -> None:
    # The launcher runs as nobody, whose login shell is nologin: OpenMPI's ssh launcher then
    # reads $SHELL, and warns in every log without one.
    env = _sh_env(tmp_path, CI_RUNNER_SHA="0" * 40)
    fake_bin = _fake_mpirun(tmp_path)
    (fake_bin / "mpirun").write_text(
        '#!/bin/sh\necho "SHELL=${SHELL-unset}"\nprintf "%s\\n" "$@"\n'
    )
    env["PATH"] = f"{fake_bin}{os.pathsep}{env['PATH']}"
    env.pop("SHELL", None)
    proc = run_script("launch.sh", env, "mpirun", "-np", "1", "true")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[0] == "SHELL=/bin/sh"
    assert "SHELL" not in proc.stdout.splitlines()[1:]  # no -x SHELL: the ranks' is sshd's
    # A shell the launcher's environment names is mpirun's, and the ranks', as before.
    proc = run_script("launch.sh", {**env, "SHELL": "/bin/bash"}, "mpirun", "-np", "1", "true")
    assert proc.stdout.splitlines()[0] == "SHELL=/bin/bash"
    assert "SHELL" in proc.stdout.splitlines()[1:]


def test_launch_starts_mpirun_without_code_of_its_own(tmp_path: Path) -> None:
    # A fixed-size job's launcher runs no rank: the workers' checkouts are the ranks' (-wdir).
    env = _sh_env(tmp_path, CI_RUNNER_SHA="0" * 40)
    env["PATH"] = f"{_fake_mpirun(tmp_path)}{os.pathsep}{env['PATH']}"
    proc = run_script("launch.sh", env, "mpirun", "-np", "1", "true")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[:2] == ["-wdir", env["CI_RUNNER_CODE_DIR"]]
    assert not (tmp_path / "pod" / "code").exists()


def test_launch_waits_for_every_worker_name_to_resolve_before_mpirun(tmp_path: Path) -> None:
    # The launcher pod starts once the workers are Ready; the cluster DNS may serve their records
    # a moment later, and ssh would fail with "Could not resolve hostname".
    fake_bin = _fake_mpirun(tmp_path)
    tries = tmp_path / "tries"
    (fake_bin / "getent").write_text(  # resolves w-1 only at the third try, never "bad"
        f'#!/bin/sh\necho "$2" >>{tries}\ncase "$2" in bad) exit 2 ;; esac\n'
        f'[ "$2" != w-1 ] || [ "$(grep -c w-1 {tries})" -ge 3 ] || exit 2\n'
        'echo "10.0.0.1 $2"\n'
    )
    (fake_bin / "getent").chmod(0o755)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("w-0 slots=1\nw-1 slots=1\n")
    env = _sh_env(tmp_path, CI_RUNNER_DNS_WAIT="1")
    env["PATH"] = f"{fake_bin}{os.pathsep}{env['PATH']}"
    proc = run_script("launch.sh", env, "mpirun", "--hostfile", str(hostfile), "true")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert tries.read_text() == "w-0\nw-1\nw-1\nw-1\n"
    hostfile.write_text("w-0 slots=1\nbad slots=1\n")
    proc = run_script("launch.sh", env, "mpirun", "--hostfile", str(hostfile), "true")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"ci-runner: worker bad does not resolve after 1s ({hostfile}); fix: check the cluster "
        "DNS for the job's Service, and kubernetes.dns_config in train.yaml\n"
    )


def test_launch_runs_its_arguments_from_the_code_at_the_sha(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    env = _fetched(tmp_path, remote)
    proc = run_script("launch.sh", env, "python3", "train.py")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "old\n", "")
    failing = run_script("launch.sh", env, "sh", "-c", "exit 7")
    assert failing.returncode == 7


def test_launch_refuses_code_at_another_commit(
    tmp_path: Path, remote: tuple[str, str, str]
) -> None:
    env = _fetched(tmp_path, remote)
    env["CI_RUNNER_SHA"] = remote[2]
    proc = run_script("launch.sh", env, "true")
    assert proc.returncode == 1
    assert proc.stderr == (
        f"ci-runner: {tmp_path / 'pod' / 'code'} is not at commit {remote[2]}; fix: the "
        "fetch-code init container must run first\n"
    )


# The scripts as the rendered MPIJob runs them


def _container(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    (container,) = [c for c in containers if c["name"] == name]
    return dict(container)


def _run_in_pod(
    command: list[str] | None,
    container: Mapping[str, Any],
    pod_dir: Path,
    base: Mapping[str, str],
    secret: Mapping[str, str] | None = None,
    mounts: Mapping[str, Path] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``command`` (None: the container's command and args) with the container's env, as the
    kubelet gives them (``$(VAR)`` expanded, Secret references read from ``secret``, "" when
    absent), its /ci-runner paths moved under ``pod_dir`` and each of ``mounts`` to its host
    directory."""
    moved = {"/ci-runner/": f"{pod_dir}/", **{k: str(v) for k, v in (mounts or {}).items()}}

    def host(text: str) -> str:
        for path, there in moved.items():
            text = text.replace(path, there)
        return text

    env = {
        **base,
        "CI_RUNNER_CODE_DIR": f"{pod_dir}/code",
        "CI_RUNNER_VENV": f"{pod_dir}/venv",
        "CI_RUNNER_READY_FILE": f"{pod_dir}/ready",
        "CI_RUNNER_SSH_DIR": f"{pod_dir}/ssh",
    }
    seen = container_view(container, lambda ref: (secret or {}).get(ref["secretKeyRef"]["key"], ""))
    env.update({name: host(value) for name, value in seen["env"].items()})
    argv = [*seen["command"], *seen["args"]] if command is None else command
    argv = [re.sub(r"^/ci-runner-scripts/", f"{SCRIPTS}/", arg) for arg in argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)


def test_rendered_worker_and_launcher_run_the_pinned_commit(
    tmp_path: Path, remote: tuple[str, str, str], wheelhouse: Path, listening_port: int
) -> None:
    url, old, _new = remote
    config = TrainConfig(
        name="e2e",
        image="img",
        command=("python3", "train.py"),
        workers=2,
        requirements="requirements.txt",
    )
    # Rendered for the https:// URL a job has (a file:// one is refused), fetched from the bare
    # repository here.
    ctx = CIContext(sha=old, project_path="g/p", job_id="1", repo_url=HTTPS_REMOTE)
    specs = render_mpijob(trusted_plan(config, ctx))["spec"]["mpiReplicaSpecs"]
    for spec in specs.values():
        for container in spec["template"]["spec"].get("initContainers", []):
            for entry in container.get("env", []):
                if entry.get("value") == HTTPS_REMOTE:
                    entry["value"] = url
    worker = specs["Worker"]["template"]["spec"]
    launcher = specs["Launcher"]["template"]["spec"]
    base = _sh_env(tmp_path, PIP_FIND_LINKS=str(wheelhouse), CI_RUNNER_SSH_PORT=str(listening_port))
    worker_dir = tmp_path / "worker"
    for name in ("fetch-code", "install-requirements"):
        container = _container(worker, name)
        proc = _run_in_pod(None, container, worker_dir, base)
        assert proc.returncode == 0, proc.stderr
    main = _container(worker, "worker")
    assert main["command"][-1] == "/ci-runner-scripts/sshd.sh"
    probe = container_view(main, lambda ref: "")["probe"]
    assert {"name": "CI_RUNNER_SSH_PORT", "value": "22"} in main["env"]
    on_test_port = {**main, "env": [e for e in main["env"] if e["name"] != "CI_RUNNER_SSH_PORT"]}
    assert _run_in_pod(probe, on_test_port, worker_dir, base).returncode == 0
    ranks_path = f"{worker_dir}/venv/bin{os.pathsep}{base['PATH']}"  # as launch.sh gives it
    rank = _run_in_pod(
        ["python", "-c", "import tinypkg; print(tinypkg.VALUE)"],
        main,
        worker_dir,
        {**base, "PATH": ranks_path},
    )
    assert (rank.returncode, rank.stdout) == (0, "from the wheel\n")

    assert "initContainers" not in launcher  # no code of its own: the ranks run the workers'
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    mpirun = fake_bin / "mpirun"
    # mpirun's options end at "--" (OpenMPI 4.1's opal_cmd_line_parse): print them, run the
    # job's command in -wdir, as orted does on a worker.
    mpirun.write_text(
        '#!/bin/sh\nwhile [ "$1" != -- ]; do\n'
        '    [ "$1" != -wdir ] || cd "$2"\n    opts="$opts $1"; shift\ndone\nshift\n'
        'echo "mpirun$opts" | sed "s/ -x [^ ]*//g"\nexec "$@"\n'
    )
    mpirun.chmod(0o755)
    routes = tmp_path / "route"
    routes.write_text(ROUTE_TABLE)
    base = {
        **base,
        "PATH": f"{fake_bin}{os.pathsep}{base['PATH']}",
        "CI_RUNNER_ROUTE_TABLE": str(routes),
    }
    entry = _container(launcher, "launcher")
    # Its /ci-runner/code is the workers' path: the same in every pod.
    proc = _run_in_pod(None, entry, worker_dir, base)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == (
        f"mpirun -wdir {worker_dir}/code -mca btl_tcp_if_include eth0 --allow-run-as-root "
        "--tag-output -np 2 --hostfile /etc/mpi/hostfile -bind-to none -map-by slot -mca pml ob1 "
        "-mca btl ^openib\nold\n"
    )
