"""`make image-check` (testing/image_check.py): what it reads from the Dockerfile and the apt
sources, and that an image without git fails it."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from testing import image_check
from testing.dist import build_wheel
from testing.image_check import CheckFailed, apt_mirror, check, parse_dockerfile
from testing.paths import REPO_ROOT, cache_dir

DOCKERFILE = REPO_ROOT / "Dockerfile"


def test_the_package_list_and_suite_come_from_the_dockerfile() -> None:
    image = parse_dockerfile(DOCKERFILE)
    assert image.suite == "bookworm"
    assert image.packages == ["python3", "python3-venv", "git", "ca-certificates"]
    assert [step.keyword for step in image.steps] == ["COPY", "RUN", "ENV", "USER", "WORKDIR"]


def test_an_instruction_it_cannot_replay_is_refused(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    text = DOCKERFILE.read_text().replace("USER 1000:1000", 'ENTRYPOINT ["ci-runner"]')
    dockerfile.write_text(text)
    line = text[: text.index("ENTRYPOINT")].count("\n") + 1
    with pytest.raises(CheckFailed) as error:
        parse_dockerfile(dockerfile)
    assert str(error.value) == (
        f"{dockerfile} line {line}: the image check does not replay ENTRYPOINT; replay it in "
        "testing/image_check.py or leave it out"
    )


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    (user,) = [step for step in parse_dockerfile(DOCKERFILE).steps if step.keyword == "USER"]
    assert user.argument == "1000:1000"


def test_a_user_name_is_refused_with_its_line(tmp_path: Path) -> None:
    # a kubelet with runAsNonRoot cannot tell whether a name is root, and refuses the image
    dockerfile = tmp_path / "Dockerfile"
    text = DOCKERFILE.read_text().replace("USER 1000:1000", "USER ci-runner")
    dockerfile.write_text(text)
    line = text[: text.index("USER ci-runner")].count("\n") + 1
    with pytest.raises(CheckFailed) as error:
        parse_dockerfile(dockerfile)
    assert str(error.value) == (
        f"{dockerfile} line {line}: USER ci-runner is not numeric, and with runAsNonRoot the "
        'kubelet refuses the image ("container has runAsNonRoot and image has non-numeric user '
        '(ci-runner), cannot verify user is non-root"); fix: USER <uid>:<gid> of that user, '
        "e.g. USER 1000:1000"
    )


@pytest.mark.parametrize("user", ["ci-runner:1000", "1000:ci-runner", "${UID}"])
def test_any_name_in_the_user_is_refused(tmp_path: Path, user: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILE.read_text().replace("USER 1000:1000", f"USER {user}"))
    with pytest.raises(CheckFailed, match=f"USER {re.escape(user)} is not numeric"):
        parse_dockerfile(dockerfile)


def test_root_is_refused(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    text = DOCKERFILE.read_text().replace("USER 1000:1000", "USER 0:0")
    dockerfile.write_text(text)
    line = text[: text.index("USER 0:0")].count("\n") + 1
    with pytest.raises(CheckFailed) as error:
        parse_dockerfile(dockerfile)
    assert str(error.value) == (
        f"{dockerfile} line {line}: USER 0:0 is root, and with runAsNonRoot the kubelet refuses "
        'the image ("container has runAsNonRoot and image will run as root"); fix: USER 1000:1000'
    )


def test_the_mirror_comes_from_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.test/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.test/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert apt_mirror("bookworm", tmp_path) == "http://mirror.test/debian"


def test_the_mirror_comes_from_a_one_line_sources_list(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(
        "# deb http://old.test/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.test/debian bookworm main\n"
    )
    assert apt_mirror("bookworm", tmp_path) == "http://mirror.test/debian"


def test_no_source_for_the_suite_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CheckFailed) as error:
        apt_mirror("trixie", tmp_path)
    assert str(error.value) == (
        f"no apt source for Debian trixie under {tmp_path}: add one (deb822 or list)"
    )


def test_the_trusted_bundle_is_pips_then_the_systems_then_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pips, system = tmp_path / "pip.pem", tmp_path / "system.pem"
    pips.write_text("pip's")
    system.write_text("system's")
    monkeypatch.setattr(image_check, "SYSTEM_BUNDLE", system)
    monkeypatch.setenv("PIP_CERT", str(pips))
    assert image_check.trusted_bundle() == pips
    monkeypatch.delenv("PIP_CERT")
    assert image_check.trusted_bundle() == system
    system.unlink()
    assert image_check.trusted_bundle() is None


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap and chroot need root")
@pytest.mark.skipif(shutil.which("debootstrap") is None, reason="apt-get install debootstrap")
def test_an_image_without_git_fails_the_check(tmp_path: Path) -> None:
    context = tmp_path / "context"
    build_wheel(context / "dist")
    dockerfile = context / "Dockerfile"
    text = DOCKERFILE.read_text()
    assert " python3-venv git ca-certificates " in text
    dockerfile.write_text(
        text.replace(" python3-venv git ca-certificates ", " python3-venv ca-certificates ")
    )
    with pytest.raises(CheckFailed) as error:
        check(dockerfile, context, cache_dir() / "image-check")
    assert str(error.value) == (
        "`ci-runner validate --config examples/simple_ml/train.yaml` failed in the image (1) as "
        "1000:1000: ci-runner: error: git is not installed; fix: install git and run again"
    )
