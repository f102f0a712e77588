"""`make image-check`: the CI job image's contents run ci-runner, checked without a container
daemon or a registry. Usage (as root)::

    python -m testing.image_check [--dockerfile Dockerfile] [--context DIR] [--cache DIR]

The root filesystem is built from the Dockerfile itself: its ``FROM debian:<suite>-slim`` and the
packages of its ``apt-get install`` line go to ``debootstrap --variant=minbase`` (from the mirror
this machine's apt sources name; the base is cached by suite, mirror and package list), then its
``COPY``, ``RUN``, ``ENV``, ``USER`` and ``WORKDIR`` are replayed in a chroot. There, as the
Dockerfile's user, in a checkout of the example owned by root (as GitLab Runner's helper clones
it), it runs ``ci-runner --version``, ``validate`` and ``render``, then the pods' fetch-code
script, which runs in this image (the default setup image). Each chroot command runs in a
mount namespace of its own (``unshare``), so its /proc and /dev mounts end with it.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testing.git import run_git
from testing.paths import EXAMPLE, REPO_ROOT, cache_dir

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
APT_SOURCES = Path("/etc/apt")
CHECKOUT = "/builds/team/simple_ml"  # where GitLab Runner's docker executor clones
ORIGIN = "https://gitlab.example.com/team/simple_ml.git"


class CheckFailed(Exception):
    """The image would not run ci-runner (or cannot be built): one line saying why."""


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, ...
    argument: str
    line: int


@dataclass
class Image:
    """What the Dockerfile says, as far as the check replays it."""

    suite: str
    packages: list[str]
    steps: list[Instruction] = field(default_factory=list)  # COPY, RUN, ENV, USER, WORKDIR


def instructions(text: str) -> Iterator[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        pending.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            keyword, _, argument = " ".join(pending).partition(" ")
            yield Instruction(keyword.upper(), argument.strip(), start)
            pending = []
    if pending:
        raise CheckFailed(f"Dockerfile line {start}: the instruction never ends (a trailing \\)")


def apt_packages(command: str) -> list[str]:
    """The package names of the ``apt-get install`` in a RUN command, options left out."""
    words = shlex.split(command)
    for index in range(len(words) - 1):
        if words[index] == "apt-get" and "install" in words[index + 1 :]:
            rest = words[words.index("install", index) + 1 :]
            packages = []
            for word in rest:
                if word in ("&&", "||", ";", "|"):
                    break
                if not word.startswith("-"):
                    packages.append(word)
            return packages
    return []


def parse_dockerfile(path: Path) -> Image:
    """The suite, the package list and the steps to replay (:class:`CheckFailed` if unusable)."""
    suite = None
    packages: list[str] = []
    steps: list[Instruction] = []
    for instruction in instructions(path.read_text(encoding="utf-8")):
        if instruction.keyword == "FROM":
            match = re.fullmatch(r"debian:([a-z]+)-slim", instruction.argument)
            if match is None:
                raise CheckFailed(
                    f"{path} line {instruction.line}: FROM {instruction.argument} is not "
                    "debian:<suite>-slim, which debootstrap can rebuild"
                )
            suite = match.group(1)
        elif instruction.keyword == "RUN" and apt_packages(instruction.argument):
            packages = apt_packages(instruction.argument)  # installed by debootstrap instead
        elif instruction.keyword == "USER":
            check_numeric_user(path, instruction)
            steps.append(instruction)
        elif instruction.keyword in ("COPY", "RUN", "ENV", "WORKDIR"):
            steps.append(instruction)
        elif instruction.keyword not in ("ARG", "LABEL"):
            raise CheckFailed(
                f"{path} line {instruction.line}: the image check does not replay "
                f"{instruction.keyword}; replay it in testing/image_check.py or leave it out"
            )
    if suite is None:
        raise CheckFailed(f"{path}: no FROM debian:<suite>-slim")
    if not packages:
        raise CheckFailed(f"{path}: no RUN ... apt-get install <packages>")
    return Image(suite, packages, steps)


NUMERIC_USER = re.compile(r"[0-9]+(:[0-9]+)?")


def check_numeric_user(path: Path, instruction: Instruction) -> None:
    """``USER <uid>[:<gid>]``: with runAsNonRoot the kubelet refuses an image whose user is a name
    (verifyRunAsNonRoot, pkg/kubelet/kuberuntime/security_context_others.go, v1.35.4) and one
    that runs as uid 0."""
    user = instruction.argument
    where = f"{path} line {instruction.line}: USER {user}"
    if NUMERIC_USER.fullmatch(user) is None:
        name = user.split(":")[0]
        raise CheckFailed(
            f"{where} is not numeric, and with runAsNonRoot the kubelet refuses the image "
            f'("container has runAsNonRoot and image has non-numeric user ({name}), cannot '
            'verify user is non-root"); fix: USER <uid>:<gid> of that user, e.g. USER 1000:1000'
        )
    if user.split(":")[0] == "0":
        raise CheckFailed(
            f"{where} is root, and with runAsNonRoot the kubelet refuses the image "
            '("container has runAsNonRoot and image will run as root"); fix: USER 1000:1000'
        )


def deb822_paragraphs(text: str) -> Iterator[dict[str, str]]:
    paragraph: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if paragraph:
                yield paragraph
            paragraph = {}
        elif not line.startswith("#") and ":" in line and not line[0].isspace():
            key, _, value = line.partition(":")
            paragraph[key.strip().lower()] = value.strip()
    return


def apt_mirror(suite: str, apt_dir: Path = APT_SOURCES) -> str:
    """The first ``deb`` URI this machine's apt sources give for ``suite`` (sources.list.d/
    *.sources in deb822 form, or one-line sources.list entries)."""
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for paragraph in deb822_paragraphs(path.read_text(encoding="utf-8")):
            if paragraph.get("enabled", "yes") == "no":
                continue
            if (
                "deb" in paragraph.get("types", "").split()
                and suite in paragraph.get("suites", "").split()
            ):
                return paragraph["uris"].split()[0]
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    raise CheckFailed(f"no apt source for Debian {suite} under {apt_dir}: add one (deb822 or list)")


def base_archive(image: Image, mirror: str, cache: Path) -> Path:
    """A tarball of ``debootstrap --variant=minbase --include=<packages>``, made once per suite,
    mirror, architecture and package list."""
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    key = "\n".join([image.suite, mirror, arch, "minbase", *sorted(image.packages)])
    archive = cache / f"{image.suite}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.tar"
    if archive.is_file():
        say(f"debootstrap base from the cache ({archive.name})")
        return archive
    if shutil.which("debootstrap") is None:
        raise CheckFailed("debootstrap is not installed; fix: apt-get install debootstrap")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        root = Path(scratch) / "root"
        say(f"debootstrap {image.suite} with {' '.join(image.packages)} (once) ...")
        done = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(image.packages)}",
                image.suite,
                str(root),
                mirror,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            log = (done.stdout + done.stderr).strip().splitlines()
            raise CheckFailed(f"debootstrap failed: {log[-1] if log else done.returncode}")
        partial = archive.with_suffix(".partial")
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True
        )
        partial.rename(archive)
    return archive


def chroot(
    root: Path, command: str, env: Mapping[str, str], user: str = "0:0", cwd: str = "/"
) -> subprocess.CompletedProcess[str]:
    """``sh -c command`` in ``root`` as ``user`` (uid:gid) with exactly ``env``, /proc and /dev
    mounted in a mount namespace that ends with it."""
    inner = (
        f"mount -t proc proc {shlex.quote(str(root / 'proc'))} && "
        f"mount --rbind /dev {shlex.quote(str(root / 'dev'))} && "
        f"exec chroot --userspec={user} {shlex.quote(str(root))} "
        f"/bin/sh -c {shlex.quote(f'cd {shlex.quote(cwd)} && {command}')}"
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", inner],
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )


def expand(value: str, env: Mapping[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced as the Dockerfile's ENV does."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: env.get(m.group(1) or m.group(2), ""), value)


@dataclass
class Replayed:
    """The image after its steps: the environment, the user (uid:gid) and the working dir."""

    env: dict[str, str]
    user: str
    workdir: str


BUILD_CA = "/tmp/image-check-ca.crt"  # removed after the RUN steps, as a build secret is
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # Debian's, and its images'
PASSED_THROUGH = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_DEFAULT_TIMEOUT")
PROXIES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def trusted_bundle() -> Path | None:
    """The CA bundle this machine's pip trusts (PIP_CERT, else the system's), None if there is
    none: this machine's network may re-sign TLS with a CA of its own."""
    bundle = Path(os.environ.get("PIP_CERT") or SYSTEM_BUNDLE)
    return bundle if bundle.is_file() else None


def builder_env(root: Path) -> dict[str, str]:
    """What a builder on this machine passes to RUN steps: its package index, proxies and the CA
    bundle its pip trusts (:func:`trusted_bundle`), never kept in the image."""
    env = {k: os.environ[k] for k in (*PASSED_THROUGH, *PROXIES) if k in os.environ}
    bundle = trusted_bundle()
    if bundle is not None:
        shutil.copy(bundle, root / BUILD_CA.lstrip("/"))
        env["PIP_CERT"] = BUILD_CA
    return env


def replay(image: Image, root: Path, context: Path) -> Replayed:
    """Replay the Dockerfile's steps in ``root`` as a builder would (:class:`CheckFailed`)."""
    build = builder_env(root)
    try:
        return _replay(image, root, context, build)
    finally:
        (root / BUILD_CA.lstrip("/")).unlink(missing_ok=True)


def _replay(image: Image, root: Path, context: Path, build: Mapping[str, str]) -> Replayed:
    env = {"PATH": DEFAULT_PATH, "HOME": "/root"}
    user, workdir = "0:0", "/"
    for step in image.steps:
        if step.keyword == "ENV":
            name, _, value = step.argument.partition("=")
            env[name.strip()] = expand(value.strip().strip('"'), env)
        elif step.keyword == "WORKDIR":
            workdir = step.argument
            (root / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif step.keyword == "USER":
            user = passwd_ids(root, step.argument)
        elif step.keyword == "COPY":
            *sources, dest = shlex.split(step.argument)
            copy_in(context, sources, root, dest, step.line)
        else:
            done = chroot(root, step.argument, {**build, **env}, user, workdir)
            if done.returncode != 0:
                last = (done.stdout + done.stderr).strip().splitlines()
                raise CheckFailed(
                    f"Dockerfile line {step.line}: RUN failed ({done.returncode}): "
                    f"{last[-1] if last else 'no output'}"
                )
    return Replayed(env, user, workdir)


def copy_in(context: Path, sources: Sequence[str], root: Path, dest: str, line: int) -> None:
    files = [Path(p) for s in sources for p in sorted(glob.glob(str(context / s)))]
    if not files:
        raise CheckFailed(
            f"Dockerfile line {line}: COPY {' '.join(sources)} matches nothing in {context}"
            + ("; fix: make dist" if any("dist/" in s for s in sources) else "")
        )
    target = root / dest.lstrip("/")
    if dest.endswith("/"):
        target.mkdir(parents=True, exist_ok=True)
    for source in files:
        shutil.copy(source, target / source.name if dest.endswith("/") else target)


def passwd_ids(root: Path, user: str) -> str:
    """``uid:gid`` of ``USER <uid>[:<gid>]``: a uid the image's /etc/passwd has (the gid, when
    not given, is that user's)."""
    uid, _, gid = user.partition(":")
    for line in (root / "etc" / "passwd").read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if fields[2] == uid:
            return f"{uid}:{gid or fields[3]}"
    raise CheckFailed(f"USER {user}: no user with uid {uid} in the image's /etc/passwd")


def user_home(root: Path, ids: str) -> str:
    uid = ids.split(":")[0]
    for line in (root / "etc" / "passwd").read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if fields[2] == uid:
            return fields[5]
    return "/"


def example_checkout(root: Path) -> Path:
    """The example committed in ``root``'s /builds, owned by root as the runner's clone is."""
    repo = root / CHECKOUT.lstrip("/")
    shutil.copytree(
        REPO_ROOT / EXAMPLE, repo / EXAMPLE, ignore=shutil.ignore_patterns("__pycache__")
    )
    run_git(["init", "-q", "-b", "main"], repo)
    run_git(["remote", "add", "origin", ORIGIN], repo)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "simple_ml example"], repo)
    return repo


# The pods' git fetch runs in this image (the component's default setup image): its script, as
# the ConfigMap carries it, fetches the example's commit from the checkout, as the image's user.
FETCH_CODE = "/tmp/fetch-code.sh"
CHECKS = [
    "ci-runner --version",
    f"ci-runner validate --config {EXAMPLE}/train.yaml",
    f"ci-runner render --config {EXAMPLE}/train.yaml --setup-image "
    "registry.example.com/team/ci-runner:1.2.0 > /tmp/mpijob.yaml",
    # fetch-code's git reads no system configuration (no safe.directory): it fetches from a
    # repository its user owns, as a pod's comes from a server.
    f"git clone -q --bare {CHECKOUT} /tmp/origin.git && CI_RUNNER_REPO_URL=file:///tmp/origin.git "
    f"CI_RUNNER_SHA=$(git rev-parse HEAD) CI_RUNNER_CODE_DIR=/tmp/fetched "
    f"CI_RUNNER_UV=/tmp/tools/uv sh {FETCH_CODE}",
    # ... and leaves its uv for install-requirements, which runs it in train.yaml's image.
    "/tmp/tools/uv --version",
]


def check(dockerfile: Path, context: Path, cache: Path) -> list[str]:
    """Build the image's filesystem and run :data:`CHECKS` in it; their first output lines."""
    if os.geteuid() != 0:
        raise CheckFailed("the image check needs root (debootstrap, chroot); fix: run it as root")
    image = parse_dockerfile(dockerfile)
    archive = base_archive(image, apt_mirror(image.suite), cache)
    with tempfile.TemporaryDirectory(prefix="image-check-") as scratch:
        root = Path(scratch)
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-xf", str(archive)], check=True)
        shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")  # pip in RUN steps
        say("replaying the Dockerfile's COPY, RUN, ENV, USER and WORKDIR ...")
        image_state = replay(image, root, context)
        example_checkout(root)
        shutil.copy(REPO_ROOT / "templates" / "scripts" / "fetch-code.sh", root / FETCH_CODE[1:])
        env = {**image_state.env, "HOME": user_home(root, image_state.user)}
        outputs = []
        for command in CHECKS:
            done = chroot(root, command, env, image_state.user, CHECKOUT)
            if done.returncode != 0:
                raise CheckFailed(
                    f"`{command}` failed in the image ({done.returncode}) as {image_state.user}: "
                    + " | ".join((done.stdout + done.stderr).strip().splitlines()[-2:])
                )
            first = (done.stdout or done.stderr).strip().splitlines()
            outputs.append(f"{command}: {first[0] if first else '(no output)'}")
        rendered = (root / "tmp" / "mpijob.yaml").read_text(encoding="utf-8")
        if "kind: MPIJob" not in rendered or "#!/bin/sh" not in rendered:
            raise CheckFailed("ci-runner render in the image printed no MPIJob with pod scripts")
        outputs[2] = f"{CHECKS[2]}: {len(rendered)} bytes of MPIJob"
    return outputs


def say(text: str) -> None:
    print(f"[image-check] {text}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.image_check", description=__doc__)
    parser.add_argument("--dockerfile", type=Path, default=REPO_ROOT / "Dockerfile")
    parser.add_argument("--context", type=Path, help="build context (default: its directory)")
    parser.add_argument("--cache", type=Path, default=cache_dir() / "image-check")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        lines = check(args.dockerfile, args.context or args.dockerfile.parent, args.cache)
    except CheckFailed as error:
        print(f"[image-check] error: {error}", file=sys.stderr)
        return 1
    for line in lines:
        say(line)
    say(
        f"ok: {platform.machine()} image of {args.dockerfile.name} runs ci-runner "
        f"({time.monotonic() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
