"""The virtualenv module the pods run with the image's Python and ``--local`` imports: the key
(the files a requirements file includes, never a local path), the .pth files and the cache."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci_runner import venv_layer

MODULE = Path(venv_layer.__file__)
PYTHON = ("3.11.7 (main)", "/usr/bin/python3", "/usr", "linux-x86_64")


def _code(tmp_path: Path, files: dict[str, str]) -> Path:
    code = tmp_path / "code"
    for name, text in files.items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text(text)
    return code


def _key(code: Path, environ: dict[str, str] | None = None, paths: tuple[str, ...] = ()) -> str:
    read = venv_layer.read_requirements("requirements.txt", str(code))
    assert read.uncached is None
    return venv_layer.venv_key(read.files, PYTHON, paths, environ or {})


def test_the_requirements_are_read_with_what_they_include_recursively(tmp_path: Path) -> None:
    code = _code(
        tmp_path,
        {
            "requirements.txt": "-r reqs/base.txt\nnumpy  # pinned below\n-c constraints.txt\n",
            "reqs/base.txt": "--requirement=extra.txt\n-r ../requirements.txt\n",
            "reqs/extra.txt": "pandas\n",
            "constraints.txt": "numpy==2.1.0\n",
        },
    )
    read = venv_layer.read_requirements("./requirements.txt", str(code))
    assert read == venv_layer.Requirements(
        files=[
            ("requirements.txt", b"-r reqs/base.txt\nnumpy  # pinned below\n-c constraints.txt\n"),
            ("reqs/base.txt", b"--requirement=extra.txt\n-r ../requirements.txt\n"),
            ("reqs/extra.txt", b"pandas\n"),
            ("constraints.txt", b"numpy==2.1.0\n"),
        ],
        uncached=None,
    )  # fmt: skip


def test_includes_are_every_r_and_c_line_past_a_local_path_too() -> None:
    data = (
        b"-r base.txt  # first\n# -r commented.txt\n./libs/pkg\n--constraint ../c.txt\n"
        b"-c=/etc/pip/constraints.txt\nnumpy -r not-an-option.txt\n--requirement=x/../y.txt\n"
    )
    assert venv_layer.includes("reqs/requirements.txt", data) == [
        "reqs/base.txt",
        "c.txt",
        "/etc/pip/constraints.txt",
        "reqs/y.txt",
    ]


def test_the_key_changes_when_only_an_included_file_changes(tmp_path: Path) -> None:
    code = _code(tmp_path, {"requirements.txt": "-r base.txt\n", "base.txt": "tinypkg\n"})
    key = _key(code)
    assert _key(code) == key
    (code / "base.txt").write_text("tinypkg==1.0\n")
    assert _key(code) != key


def test_the_key_is_the_files_the_python_its_distributions_and_pip_settings(
    tmp_path: Path,
) -> None:
    code = _code(tmp_path, {"requirements.txt": "tinypkg==1.0\n"})
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "torch-2.13.0.dist-info").mkdir()
    (site / "torch").mkdir()  # a package, not a distribution: not in the key
    # The format is pinned: another key is every pod's cache missed once.
    assert _key(code) == "557c7d10a09181c1ad356f3592d1dcf4"
    keys = {
        _key(code),
        _key(code, paths=(str(site),)),
        _key(code, {"PIP_INDEX_URL": "https://pypi.example.com/simple"}),
    }
    (site / "numpy-2.1.0.dist-info").mkdir()
    keys.add(_key(code, paths=(str(site),)))
    assert len(keys) == 4
    (site / "torch" / "extra.py").write_text("")
    assert _key(code, paths=(str(site),)) in keys
    assert _key(code, {"PIP_CACHE_DIR": "/elsewhere"}) == _key(code)  # where, not what


@pytest.mark.parametrize(
    "line",
    [
        "./libs/pkg",
        "-e .",
        "--editable=git+https://example.com/p.git#egg=p",
        "--find-links wheels",
        "pkg @ file:///tmp/pkg.whl",
        "~/pkg",
        "/opt/pkg.whl",
        "libs/pkg",
    ],
)
def test_a_requirement_naming_a_local_path_is_never_cached(tmp_path: Path, line: str) -> None:
    code = _code(
        tmp_path,
        {
            "requirements.txt": "-r base.txt\nnever-read==1\n",
            "base.txt": f"tinypkg==1.0  # pinned\n{line}\n",
            "libs/pkg/setup.py": "",
            "wheels/README": "",
        },
    )
    read = venv_layer.read_requirements("requirements.txt", str(code))
    assert read.uncached == line
    assert [path for path, _ in read.files] == ["requirements.txt", "base.txt"]


def test_a_file_that_cannot_be_read_is_never_cached(tmp_path: Path) -> None:
    code = _code(tmp_path, {"requirements.txt": "-r sub/missing.txt\n"})
    read = venv_layer.read_requirements("requirements.txt", str(code))
    assert read.uncached == "sub/missing.txt (No such file or directory)"


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The module as the pods run it: ``python3 venv_layer.py ...``."""
    return subprocess.run(
        [sys.executable, str(MODULE), *args],
        cwd=cwd,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_pods_key_command_prints_the_key_or_why_there_is_none(tmp_path: Path) -> None:
    code = _code(tmp_path, {"requirements.txt": "-r base.txt\n", "base.txt": "tinypkg\n"})
    first = _cli("key", "requirements.txt", cwd=code)
    assert (first.returncode, first.stderr) == (0, "")
    assert len(first.stdout) == 33 and first.stdout.endswith("\n")
    assert _cli("key", "requirements.txt", cwd=code).stdout == first.stdout
    (code / "base.txt").write_text("tinypkg==1.0\n")
    assert _cli("key", "requirements.txt", cwd=code).stdout not in ("", first.stdout)
    assert _cli("key", "requirements.txt", cwd=code, PIP_PRE="1").stdout != first.stdout
    (code / "base.txt").write_text("-e .\n")
    uncached = _cli("key", "requirements.txt", cwd=code)
    assert (uncached.returncode, uncached.stdout, uncached.stderr) == (
        0,
        "",
        "ci-runner: the virtualenv is not cached: requirements.txt names -e .\n",
    )


def test_the_pods_key_is_the_same_wherever_the_module_is_mounted(tmp_path: Path) -> None:
    # Its own directory is sys.path's first entry, which is not the image's.
    code = _code(tmp_path, {"requirements.txt": "tinypkg\n"})
    keys = set()
    for mount in ("scripts-a", "scripts-b"):
        (tmp_path / mount).mkdir()
        copy = tmp_path / mount / "venv_layer.py"
        copy.write_text(MODULE.read_text())
        done = subprocess.run(
            [sys.executable, str(copy), "key", "requirements.txt"],
            cwd=code,
            capture_output=True,
            text=True,
            check=True,
        )
        keys.add(done.stdout)
    assert len(keys) == 1


def test_the_site_pth_adds_the_base_site_directories_the_virtualenv_lacks() -> None:
    paths = ["", "/usr/lib/python311.zip", "/img/lib/site-packages", "/usr/lib/dist-packages"]
    assert venv_layer.site_pth(paths, seen=["/usr/lib/dist-packages"]) == (
        "import site; site.addsitedir('/img/lib/site-packages')\n"
    )


def test_the_pth_command_shows_a_new_virtualenv_the_base_and_buffers_lines(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
    )
    assert _cli("pth", str(venv), cwd=tmp_path).returncode == 0
    (site,) = venv.glob("lib/python3*/site-packages")
    assert sorted(p.name for p in site.iterdir()) == [
        venv_layer.IMAGE_PTH,
        venv_layer.LINE_BUFFERED_PTH,
    ]
    assert (site / venv_layer.LINE_BUFFERED_PTH).read_text() == venv_layer.LINE_BUFFERED
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import yaml, sys; print(sys.stdout.line_buffering)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "True\n"  # PyYAML is ci-runner's (the base's), not the venv's


def _aged(path: Path, days: float) -> None:
    stamp = time.time() - days * 86400
    os.utime(path, (stamp, stamp))


def test_store_keeps_a_copy_under_the_key_and_prunes_what_no_pod_used(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    cache = tmp_path / "cache"
    for name, days in (("old", 15), ("recent", 13), (".unfinished.pod.1", 15), ("new", 30)):
        (cache / name).mkdir(parents=True)
        if not name.startswith("."):
            (cache / name / venv_layer.COMPLETE).touch()
            _aged(cache / name / venv_layer.COMPLETE, days)
        _aged(cache / name, days)

    done = _cli("store", str(venv), str(cache), "k", "14", cwd=tmp_path)

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert sorted(p.name for p in cache.iterdir()) == ["k", "recent"]
    assert os.readlink(cache / "k" / "bin" / "python") == "/usr/bin/python3"
    assert (cache / "k" / venv_layer.COMPLETE).is_file()
    # Of two pods storing the same key, the second finds it stored: it drops its own copy. An
    # old entry under the key being stored is not pruned.
    (venv / "second").touch()
    _aged(cache / "k" / venv_layer.COMPLETE, 30)
    venv_layer.store(str(venv), str(cache), "k", 14)
    assert sorted(p.name for p in cache.iterdir()) == ["k", "recent"]
    assert not (cache / "k" / "second").exists()


def _built(cache: Path, venv: Path) -> Path:
    """A virtualenv's stand-in made where ``build`` says, linked at ``venv``."""
    done = _cli("build", str(cache), "k", cwd=cache.parent)
    assert (done.returncode, done.stderr) == (0, "")
    built = Path(done.stdout.rstrip("\n"))
    assert (built.parent, built.name.startswith(".k."), built.stat().st_mode & 0o777) == (
        cache,
        True,
        0o755,
    )
    (built / "bin").mkdir()
    (built / "bin" / "activate").write_text(f'VIRTUAL_ENV="{built}"\nPS1="(venv) $PS1"\n')
    venv.symlink_to(built)
    return built


def test_keep_renames_the_virtualenv_made_on_the_claim_and_links_the_pod_to_it(
    tmp_path: Path,
) -> None:
    cache, venv = tmp_path / "cache", tmp_path / "venv"
    built = _built(cache, venv)
    (cache / "old").mkdir()
    (cache / "old" / venv_layer.COMPLETE).touch()
    _aged(cache / "old" / venv_layer.COMPLETE, 15)

    done = _cli("keep", str(built), str(cache), "k", "14", str(venv), cwd=tmp_path)

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert sorted(p.name for p in cache.iterdir()) == ["k"]
    assert os.readlink(venv) == str(cache / "k")
    assert (cache / "k" / venv_layer.COMPLETE).is_file()
    assert (venv / "bin" / "activate").read_text() == f'VIRTUAL_ENV="{venv}"\nPS1="(venv) $PS1"\n'
    # Of two pods making the same key, the second finds it kept: it drops its own and takes that.
    venv.unlink()
    second = _built(cache, venv)
    (second / "second").touch()
    venv_layer.keep(str(second), str(cache), "k", 14, str(venv))
    assert sorted(p.name for p in cache.iterdir()) == ["k"]
    assert os.readlink(venv) == str(cache / "k")
    assert not (cache / "k" / "second").exists()


def test_build_in_a_cache_it_cannot_write_says_why_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file, not a directory\n")
    done = _cli("build", "cache", "k", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "ci-runner: [Errno 17] File exists: 'cache'\n",
    )


def test_store_in_a_cache_it_cannot_write_says_why_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file, not a directory\n")
    (tmp_path / "venv").mkdir()
    done = _cli("store", "venv", "cache", "k", "14", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "ci-runner: [Errno 17] File exists: 'cache'\n",
    )


def test_the_module_needs_only_the_standard_library() -> None:
    tree = ast.parse(MODULE.read_text(encoding="utf-8"), feature_version=(3, 8))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert sorted(imported - sys.stdlib_module_names) == []
    assert "__future__" in imported
