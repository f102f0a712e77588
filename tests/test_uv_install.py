"""ci_runner/uv_install.py: uv installs as pip would in a pod, or says why pip must.

The real uv (the dev dependency, the one the nodes' setup image carries) installs into a
virtualenv layered over an "image" (a virtualenv with tinypkg 1.0, as venv_layer.py layers the
pods' virtualenv over the image's Python), from a local wheelhouse.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci_runner import uv_install, venv_layer

# The dev dependency (pip install -e '.[dev]'): the uv the nodes' setup image carries.
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
Install = tuple[Path, subprocess.CompletedProcess[str]]


def test_pips_settings_become_uvs_options_and_variables() -> None:
    environ = {
        "PIP_INDEX_URL": "https://pypi.example/simple",
        "PIP_EXTRA_INDEX_URL": "https://a.example/simple https://b.example/simple",
        "PIP_FIND_LINKS": "/wheels",
        "PIP_TRUSTED_HOST": "pypi.example",
        "PIP_NO_INDEX": "off",
        "PIP_PRE": "yes",
        "PIP_CERT": "/ca.pem",
        "PIP_PROXY": "http://proxy:3128",
        "PIP_DEFAULT_TIMEOUT": "60",
        "PIP_CACHE_DIR": "/ci-runner-cache/pip",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "HOME": "/root",
    }
    assert uv_install.uv_settings(environ) == (
        ["--index-strategy", "unsafe-best-match", "--prerelease", "allow"],
        {
            "SSL_CERT_FILE": "/ca.pem",
            "UV_HTTP_TIMEOUT": "60",
            "UV_EXTRA_INDEX_URL": "https://a.example/simple https://b.example/simple",
            "UV_FIND_LINKS": "/wheels",
            "UV_INDEX_URL": "https://pypi.example/simple",
            "HTTPS_PROXY": "http://proxy:3128",
            "HTTP_PROXY": "http://proxy:3128",
            "UV_INSECURE_HOST": "pypi.example",
        },
    )
    assert uv_install.uv_settings({"PIP_FIND_LINKS": "/a\n  /b", "PIP_ONLY_BINARY": ":all:"}) == (
        ["--only-binary", ":all:"],
        {"UV_FIND_LINKS": "/a,/b"},
    )
    assert uv_install.uv_settings({"PIP_NO_INDEX": "1"}) == (["--no-index"], {})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PIP_PREFER_BINARY", "1"),
        ("PIP_NO_BUILD_ISOLATION", "0"),  # pip reads a negative option's "0" as "on"
        ("PIP_NO_COMPILE", "1"),
        ("PIP_NO_INDEX", "maybe"),
        ("PIP_KEYRING_PROVIDER", "import"),
    ],
)
def test_a_pip_setting_uv_has_no_equivalent_of_leaves_it_to_pip(name: str, value: str) -> None:
    assert uv_install.uv_settings({name: value}) == (
        f"{name} is a pip setting uv has no equivalent of"
    )


def test_a_find_links_location_with_a_comma_leaves_it_to_pip() -> None:
    assert uv_install.uv_settings({"PIP_FIND_LINKS": "/wheels /wheels,2024"}) == (
        "PIP_FIND_LINKS has a value with a ',', which uv would split"
    )


def test_an_indexs_password_reaches_uv_in_its_environment_not_on_its_command_line(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    uv = tmp_path / "uv"
    uv.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "if '-o' in args:\n"
        "    open(args[args.index('-o') + 1], 'w').close()\n"
        "with open(os.environ['CALLS'], 'a') as file:\n"
        "    file.write(json.dumps([args[:2], os.environ.get('UV_INDEX_URL')]) + '\\n')\n"
        "    file.write(json.dumps([arg for arg in args if 's3cret' in arg]) + '\\n')\n"
    )
    uv.chmod(0o755)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("usespkg\n")
    environ = {
        "PATH": os.environ["PATH"],
        "CALLS": str(calls),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "https://ci:s3cret@pypi.example/simple",
    }
    assert uv_install.install(str(uv), str(requirements), environ) is None
    index = "https://ci:s3cret@pypi.example/simple"
    assert calls.read_text().splitlines() == [
        f'[["pip", "compile"], "{index}"]',
        "[]",
        f'[["pip", "install"], "{index}"]',
        "[]",
    ]


def test_a_pip_configuration_file_leaves_it_to_pip(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".pip").mkdir(parents=True)
    assert uv_install.pip_config_file({"HOME": str(home), "XDG_CONFIG_DIRS": "/nowhere"}) in (
        None,
        "/etc/pip.conf",  # this machine's own
    )
    (home / ".pip" / "pip.conf").write_text("[global]\nindex-url = https://x.example\n")
    found = uv_install.pip_config_file({"HOME": str(home), "XDG_CONFIG_DIRS": "/nowhere"})
    assert found in (str(home / ".pip" / "pip.conf"), "/etc/pip.conf")
    assert uv_install.pip_config_file({"PIP_CONFIG_FILE": os.devnull, "HOME": str(home)}) is None
    named = tmp_path / "pip.ini"
    named.write_text("")
    assert uv_install.pip_config_file({"PIP_CONFIG_FILE": str(named)}) == str(named)


def test_hash_checking_in_an_included_file_leaves_it_to_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reqs").mkdir()
    # venv_layer.includes reads pip's forms of an include: -r FILE, --constraint=FILE, ...
    Path("requirements.txt").write_text("--requirement=reqs/base.txt\ntinypkg\n")
    Path("reqs/base.txt").write_text("-c pins.txt\n")
    Path("reqs/pins.txt").write_text("tinypkg==1.0 --hash=sha256:00\n")
    assert uv_install.hash_checking("requirements.txt") == "reqs/pins.txt"
    devnull = {"PIP_CONFIG_FILE": os.devnull}
    assert uv_install.why_not(devnull, "requirements.txt") == "reqs/pins.txt asks for hash-checking"
    Path("reqs/pins.txt").write_text("tinypkg==1.0\n")
    assert uv_install.hash_checking("requirements.txt") is None
    assert uv_install.why_not(devnull, "requirements.txt") == ([], {})


def test_why_pip_reads_a_configuration_file_uv_would_not(tmp_path: Path) -> None:
    named = tmp_path / "pip.ini"
    named.write_text("[global]\nindex-url = https://pypi.example/simple\n")
    why = uv_install.why_not({"PIP_CONFIG_FILE": str(named)}, "requirements.txt")
    assert why == f"pip reads {named}, uv does not"


def test_the_image_pins_the_first_distribution_of_each_name_it_imports() -> None:
    pins = uv_install.image_pins(
        [("Torch", "2.5.1+cpu"), ("torch", "2.0.0"), ("zope.interface", "7.1"), ("odd", "dev")]
    )
    assert pins == ["torch==2.5.1+cpu", "zope-interface==7.1"]


def test_only_what_the_resolution_adds_to_the_image_is_installed() -> None:
    resolved = (
        "--index-url https://pypi.example/simple\n"
        "numpy==2.1.0\n"
        "Zope.Interface==7.1\n"
        "statsmodels==0.14.4\n"
        "tinypkg @ file:///ci-runner/code/libs/tinypkg\n"
    )
    assert uv_install.added(resolved, ["numpy==2.1.0", "zope-interface==7.1"]) == (
        "--index-url https://pypi.example/simple\n"
        "statsmodels==0.14.4\n"
        "tinypkg @ file:///ci-runner/code/libs/tinypkg\n"
    )


def test_uv_runs_without_the_images_uv_settings_and_caches_beside_pip(tmp_path: Path) -> None:
    claim = tmp_path / "claim"
    (claim / "venvs" / "built").mkdir(parents=True)
    venv = tmp_path / "venv"
    venv.symlink_to(claim / "venvs" / "built")
    env = uv_install.uv_environment(
        {"UV_INDEX_URL": "https://evil.example", "PIP_CACHE_DIR": f"{claim}/pip/", "A": "1"},
        {"SSL_CERT_FILE": "/ca.pem"},
        str(venv),
    )
    assert env == {
        "A": "1",
        "PIP_CACHE_DIR": f"{claim}/pip/",
        "UV_SYSTEM_CERTS": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
        "UV_CACHE_DIR": f"{claim}/uv",
        "UV_LINK_MODE": "hardlink",  # the virtualenv is made beside uv's cache
        "SSL_CERT_FILE": "/ca.pem",
    }
    assert sorted(p.name for p in claim.rglob("*")) == ["built", "uv", "venvs"]  # no probe left


def test_uv_copies_where_it_cannot_link_from_its_cache(tmp_path: Path) -> None:
    (tmp_path / "uv").write_text("a file where the cache would be\n")
    assert uv_install.link_mode(str(tmp_path / "uv"), str(tmp_path)) == "copy"
    assert uv_install.link_mode(str(tmp_path / "cache"), str(tmp_path / "no-venv")) == "copy"
    assert uv_install.link_mode(None, str(tmp_path)) == "copy"
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


# The real uv


def _wheel(root: Path, name: str, depends: str, wheels: Path) -> None:
    project = root / name
    (project / name).mkdir(parents=True)
    (project / name / "__init__.py").write_text(f"NAME = {name!r}\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{depends}]\n'
    )
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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a wheelhouse of tinypkg 1.0 and usespkg 1.0, which needs tinypkg; an "image": a Python
    with tinypkg 1.0 installed)."""
    root = tmp_path_factory.mktemp("uv-site")
    wheels = root / "wheels"
    _wheel(root, "tinypkg", "", wheels)
    _wheel(root, "usespkg", '"tinypkg>=1.0"', wheels)
    image = root / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True)
    subprocess.run(
        [
            UV,
            "pip",
            "install",
            "--quiet",
            "--no-config",
            "--python",
            str(image / "bin" / "python"),
            "--no-index",
            "--find-links",
            str(wheels),
            "tinypkg==1.0",
        ],
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("UV_")},
    )
    return wheels, image


def _pod_venv(image: Path, venv: Path) -> Path:
    """A virtualenv over ``image``'s Python as install-requirements.sh makes it."""
    python = image / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
    )
    subprocess.run([str(python), venv_layer.__file__, "pth", str(venv)], check=True)
    return venv / "bin" / "python"


def _run(
    python: Path, requirements: str, cwd: Path, wheels: Path
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_CACHE_DIR": str(cwd / "cache" / "pip"),
    }
    return subprocess.run(
        [str(python), uv_install.__file__, str(UV), requirements],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _install(tmp_path: Path, site: tuple[Path, Path], requirements: str) -> Install:
    """``requirements`` installed by uv_install.py into a pod's virtualenv over ``site``'s image."""
    wheels, image = site
    python = _pod_venv(image, tmp_path / "venv")
    (tmp_path / "requirements.txt").write_text(requirements)
    return python, _run(python, "requirements.txt", tmp_path, wheels)


def test_uv_installs_what_the_image_lacks_and_keeps_what_it_has(
    tmp_path: Path, site: tuple[Path, Path]
) -> None:
    python, done = _install(tmp_path, site, "usespkg\ntinypkg>=1.0\n")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout
        == f"ci-runner: installing requirements.txt with uv {uv_install.version(str(UV))}\n"
    )
    assert "+ usespkg==1.0" in done.stderr
    site_packages = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    assert sorted(p.name for p in site_packages.iterdir() if p.name.endswith("-info")) == [
        "usespkg-1.0.dist-info"
    ]
    imported = subprocess.run(
        [
            str(python),
            "-c",
            f"import tinypkg; print(tinypkg.__file__.startswith({str(site[1])!r}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout == "True\n"
    assert (tmp_path / "cache" / "uv").is_dir()


def test_requirements_at_odds_with_the_image_are_left_to_pip(
    tmp_path: Path, site: tuple[Path, Path]
) -> None:
    _, done = _install(tmp_path, site, "tinypkg>=2\n")
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == (
        "ci-runner: pip installs requirements.txt: uv could not resolve them with the image's "
        "packages held (above)"
    )
    assert "tinypkg" in done.stderr


def test_a_uv_that_does_not_run_here_leaves_it_to_pip(tmp_path: Path) -> None:
    uv = tmp_path / "uv"
    uv.write_bytes(b"\x7fELF not for this machine")
    uv.chmod(0o755)
    done = subprocess.run(
        [sys.executable, uv_install.__file__, str(uv), "requirements.txt"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (
        1,
        "ci-runner: pip installs requirements.txt: uv does not run in this image\n",
    )
