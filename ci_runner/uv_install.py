"""Install a requirements file into a pod's virtualenv with uv, as pip would there, or say why not.

uv resolves and installs in a fraction of pip's time. It comes from the project's trusted setup
image: fetch-code.sh copies it onto the pod's volume ($CI_RUNNER_UV) and install-requirements.sh
runs this file, from the job's ConfigMap, with the new virtualenv's Python::

    python uv_install.py UV REQUIREMENTS      # in the code directory

Exit 0: uv installed the requirements. Exit 1: it did not, and the line printed says why;
install-requirements.sh then runs pip, which stays the installer of record.

uv does not see the packages a ``--system-site-packages`` virtualenv takes from the image
(astral-sh/uv#4466): it would install torch again beside the image's. So the image's
distributions are given to uv as constraints (the image's version of each, as pip keeps a package
that is already there), uv resolves the requirements with them, and installs only what the
resolution adds to the image, without resolving again. Where uv would not do what pip does (a pip
setting it has no equivalent for, a pip configuration file, hash-checking), pip installs.

The standard library only, and nothing newer than Python 3.8, as :mod:`ci_runner.venv_layer`.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, Final, List, Mapping, Sequence, Tuple

if __package__:
    from ci_runner import venv_layer
else:  # run as a script from the job's ConfigMap, where venv_layer.py lies beside it
    import venv_layer  # type: ignore[import-not-found,no-redef]

# pip's boolean environment values (pip's strtobool).
_TRUE: Final = ("y", "yes", "t", "true", "on", "1")
_FALSE: Final = ("n", "no", "f", "false", "off", "0")
# pip settings that change nothing uv installs, and PIP_CONFIG_FILE (pip_config_file): left out
# of the translation.
_NO_EFFECT: Final = (
    "PIP_CONFIG_FILE",
    "PIP_CACHE_DIR",
    "PIP_NO_INPUT",
    "PIP_DISABLE_PIP_VERSION_CHECK",
    "PIP_PROGRESS_BAR",
    "PIP_NO_CACHE_DIR",
)
# pip settings of one or more values (whitespace-separated in pip's environment) -> uv's option.
_LISTS: Final = {
    "PIP_ONLY_BINARY": "--only-binary",
    "PIP_NO_BINARY": "--no-binary",
}
# pip settings that may hold a password (an index's URL with its credentials) -> uv's variable of
# the same meaning, and how uv splits its values. In uv's environment, not on its command line,
# which any process of the container reads in /proc.
_LOCATIONS: Final = {
    "PIP_INDEX_URL": ("UV_INDEX_URL", " "),
    "PIP_EXTRA_INDEX_URL": ("UV_EXTRA_INDEX_URL", " "),
    "PIP_FIND_LINKS": ("UV_FIND_LINKS", ","),
    "PIP_TRUSTED_HOST": ("UV_INSECURE_HOST", " "),
}
# pip settings read by uv from another variable of the same meaning.
_RENAMED: Final = {
    "PIP_CERT": "SSL_CERT_FILE",
    "PIP_CLIENT_CERT": "SSL_CLIENT_CERT",
    "PIP_PROXY": "HTTPS_PROXY",
    "PIP_TIMEOUT": "UV_HTTP_TIMEOUT",
    "PIP_DEFAULT_TIMEOUT": "UV_HTTP_TIMEOUT",
    "PIP_RETRIES": "UV_HTTP_RETRIES",
}
_PINNED: Final = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")
_VERSION: Final = re.compile(r"^[0-9][0-9A-Za-z.!+_-]*$")

Settings = Tuple[List[str], Dict[str, str]]


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def uv_settings(environ: Mapping[str, str]) -> Settings | str:
    """uv's options and environment that do what ``environ``'s PIP_* settings make pip do, or
    why uv cannot."""
    args: list[str] = []
    env: dict[str, str] = {}
    for name in sorted(environ):
        value = environ[name]
        if not name.startswith("PIP_") or name in _NO_EFFECT:
            continue
        if name in _LISTS:
            for word in value.split():
                args += [_LISTS[name], word]
        elif name in _LOCATIONS:
            variable, separator = _LOCATIONS[name]
            words = value.split()
            if any(separator in word for word in words):
                return f"{name} has a value with a '{separator}', which uv would split"
            if words:
                env[variable] = separator.join(words)
            if name == "PIP_EXTRA_INDEX_URL" and words:
                # pip takes the best version of every index; uv the first index's by default.
                args += ["--index-strategy", "unsafe-best-match"]
        elif name in _RENAMED:
            env[_RENAMED[name]] = value
            if name == "PIP_PROXY":
                env["HTTP_PROXY"] = value
        elif name in ("PIP_NO_INDEX", "PIP_PRE") and value.lower() in _TRUE + _FALSE:
            if value.lower() in _TRUE:
                args += ["--no-index"] if name == "PIP_NO_INDEX" else ["--prerelease", "allow"]
        else:
            return f"{name} is a pip setting uv has no equivalent of"
    return args, env


def pip_config_file(environ: Mapping[str, str]) -> str | None:
    """The first pip configuration file pip would read here, which uv would not; or None.
    PIP_CONFIG_FILE=/dev/null makes pip read none at all."""
    named = environ.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return None
    home = environ.get("HOME", "")
    xdg_dirs = (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    candidates = [named or "", "/etc/pip.conf"]
    candidates += [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs if d.startswith("/")]
    if home.startswith("/"):
        xdg_home = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        candidates += [os.path.join(home, ".pip", "pip.conf")]
        candidates += [os.path.join(xdg_home, "pip", "pip.conf")]
    candidates.append(os.path.join(sys.prefix, "pip.conf"))
    return next((path for path in candidates if path and os.path.isfile(path)), None)


def hash_checking(requirements: str) -> str | None:
    """The first of the requirements file and those it includes (``-r``, ``-c``, as
    :func:`venv_layer.includes` reads them) that asks pip for hash-checking, which a second
    resolution would not keep."""
    seen = set()
    todo = [os.path.normpath(requirements)]
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            continue  # uv says what is wrong with it
        if b"--hash" in data or b"--require-hashes" in data:
            return path
        todo += venv_layer.includes(path, data)
    return None


def image_pins(distributions: Sequence[tuple[str, str]]) -> list[str]:
    """``name==version`` for each distribution this Python sees, the first of a name (the one it
    imports), in order; versions pip would not read are left out."""
    pins: dict[str, str] = {}
    for name, version in distributions:
        key = canonical(name)
        if key not in pins and _VERSION.match(version):
            pins[key] = f"{key}=={version}"
    return list(pins.values())


def installed() -> list[tuple[str, str]]:
    """(name, version) of every distribution on this Python's path, in path order."""
    found = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and dist.version:
            found.append((name, dist.version))
    return found


def added(resolved: str, pins: Sequence[str]) -> str:
    """The lines of uv's resolution (``uv pip compile``'s output) but the image's packages."""
    image = {pin.split("==", 1)[0] for pin in pins}
    kept = []
    for line in resolved.splitlines():
        match = _PINNED.match(line.strip())
        if match is None or canonical(match.group(1)) not in image:
            kept.append(line)
    return "".join(f"{line}\n" for line in kept)


def link_mode(cache: str | None, prefix: str) -> str:
    """uv's link mode: hard links where a file of ``cache`` can be linked into the virtualenv
    ``prefix`` (install-requirements.sh makes it on the claim, beside the cache), copies where
    not (another mount), which uv would otherwise try first and warn of."""
    if not cache:
        return "copy"
    try:
        os.makedirs(cache, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache, prefix=".link-probe-") as probe:
            link = os.path.join(os.path.realpath(prefix), f".link-probe-{os.getpid()}")
            os.link(probe.name, link)
            os.unlink(link)
    except OSError:
        return "copy"
    return "hardlink"


def uv_environment(
    environ: Mapping[str, str], extra: Mapping[str, str], prefix: str
) -> dict[str, str]:
    """The environment uv runs with to install into the virtualenv ``prefix``: none of the
    image's UV_* settings (pip would not read them), the system's certificates (as pip's
    truststore), no Python downloads, its cache beside pip's, and :func:`link_mode`'s."""
    env = {k: v for k, v in environ.items() if not k.startswith("UV_")}
    env.update(
        UV_SYSTEM_CERTS="1",
        UV_PYTHON_DOWNLOADS="never",
        UV_NO_PROGRESS="1",
    )
    pip_cache = environ.get("PIP_CACHE_DIR")
    cache = os.path.join(os.path.dirname(pip_cache.rstrip("/")), "uv") if pip_cache else None
    if cache:
        env["UV_CACHE_DIR"] = cache
    env["UV_LINK_MODE"] = link_mode(cache, prefix)
    env.update(extra)
    return env


def why_not(environ: Mapping[str, str], requirements: str) -> Settings | str:
    """uv's settings for installing ``requirements`` as pip would, or why pip must."""
    config = pip_config_file(environ)
    if config:
        return f"pip reads {config}, uv does not"
    hashed = hash_checking(requirements)
    if hashed:
        return f"{hashed} asks for hash-checking"
    return uv_settings(environ)


def install(uv: str, requirements: str, environ: Mapping[str, str]) -> str | None:
    """Install ``requirements`` into this Python's virtualenv with ``uv``; None, or why not."""
    settings = why_not(environ, requirements)
    if isinstance(settings, str):
        return settings
    args, extra = settings
    env = uv_environment(environ, extra, sys.prefix)
    python = ["--python", sys.executable, "--no-config", "--color", "never"]
    # Beside the virtualenv, on the pod's volume: the image's /tmp may not be writable.
    beside = os.path.dirname(os.path.abspath(sys.prefix))
    with tempfile.TemporaryDirectory(prefix=".uv-", dir=beside) as tmp:
        pins = image_pins(installed())
        constraints = os.path.join(tmp, "image.txt")
        resolved = os.path.join(tmp, "resolved.txt")
        with open(constraints, "w", encoding="utf-8") as file:
            file.write("".join(f"{pin}\n" for pin in pins))
        compile_ = [uv, "pip", "compile", "--quiet", *python, "-c", constraints, "-o", resolved]
        compile_ += ["--no-header", "--no-annotate", "--emit-index-url", "--emit-find-links"]
        compile_ += [*args, "--", requirements]
        done = subprocess.run(compile_, env=env, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            return "uv could not resolve them with the image's packages held (above)"
        with open(resolved, encoding="utf-8") as file:
            new = added(file.read(), pins)
        with open(resolved, "w", encoding="utf-8") as file:
            file.write(new)
        install_ = [uv, "pip", "install", *python, "--no-deps", "-r", resolved, *args]
        if subprocess.run(install_, env=env).returncode != 0:
            return "uv could not install the resolution (above)"
    return None


def version(uv: str) -> str | None:
    """``uv --version``'s words after the name, or None when it does not run here (another
    architecture or C library than the setup image's)."""
    try:
        done = subprocess.run([uv, "--version"], stdout=subprocess.PIPE, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.split()
    return words[1] if done.returncode == 0 and len(words) > 1 else None


def main(argv: Sequence[str] | None = None) -> int:
    """The pods' command line (see the module's docstring)."""
    uv, requirements = argv if argv is not None else sys.argv[1:]
    found = version(uv)
    if found is None:
        print(f"ci-runner: pip installs {requirements}: uv does not run in this image")
        return 1
    print(f"ci-runner: installing {requirements} with uv {found}", flush=True)
    why = install(uv, requirements, os.environ)
    if why is not None:
        print(f"ci-runner: pip installs {requirements}: {why}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
