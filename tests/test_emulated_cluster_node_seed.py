"""The real nodes' images and roots, made without starting anything (fast, no root): the site
layer taken from a virtualenv (testing/emulated_cluster/sitelayer.py), the names archives give
containerd, and a node's copy of the seed root (testing/emulated_cluster/seedroot.py)."""

from __future__ import annotations

import json
import os
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from testing import image_check
from testing.emulated_cluster import imagestore, nodeimages, seedroot, sitelayer
from testing.emulated_cluster.imagestore import Source

VERSION = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _dist(site: Path, name: str, requires: list[str], files: dict[str, str]) -> None:
    """An installed distribution: its files (paths relative to site-packages) and RECORD."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0"]
    (info / "METADATA").write_text("\n".join([*lines, *(f"Requires-Dist: {r}" for r in requires)]))
    for path, text in files.items():
        target = Path(os.path.normpath(site / path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    record = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in record))


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    prefix = tmp_path / "venv"
    site = prefix / "lib" / VERSION / "site-packages"
    _dist(site, "alpha", ["beta[extra]", 'gamma; extra == "other"'], {"alpha/__init__.py": ""})
    _dist(site, "beta", ['delta; extra == "extra"'], {"beta.py": "", "../../../bin/beta-cli": ""})
    _dist(site, "gamma", [], {"gamma.py": ""})
    _dist(site, "delta", [], {"delta.py": "", "../../../share/delta/data.txt": "d"})
    script = f"#!{prefix}/bin/python\nimport sys\n"
    (prefix / "bin" / "beta-cli").write_text(script)
    return prefix


def test_the_closure_follows_requirements_and_the_extras_they_ask_for(venv: Path) -> None:
    dists = sitelayer.installed(venv)
    assert sitelayer.closure(["alpha"], dists) == ["alpha", "beta", "delta"]
    with pytest.raises(
        sitelayer.SiteFailed, match=r"^the virtualenv has no nope; fix: make horovod$"
    ):
        sitelayer.closure(["nope"], dists)


def test_the_layer_puts_files_where_pip_puts_them_in_the_image(
    venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sitelayer, "ROOTS", ("alpha",))
    root = sitelayer.write(venv, tmp_path / "layer")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
    dist = f"usr/local/lib/{VERSION}/dist-packages"
    assert files == sorted(
        [
            "usr/bin/python",
            f"usr/lib/{VERSION}/.wh.EXTERNALLY-MANAGED",
            "usr/local/bin/beta-cli",
            "usr/local/share/delta/data.txt",
            f"{dist}/alpha/__init__.py",
            f"{dist}/beta.py",
            f"{dist}/delta.py",
            *(
                f"{dist}/{n}-1.0.dist-info/{f}"
                for n in ("alpha", "beta", "delta")
                for f in ("METADATA", "RECORD")
            ),
        ]
    )
    assert os.readlink(root / "usr" / "bin" / "python") == "python3"
    assert (root / "usr/local/bin/beta-cli").read_text() == f"#!/usr/bin/{VERSION}\nimport sys\n"
    # The same file, not a copy: the cache is on the virtualenv's file system here.
    assert (root / dist / "beta.py").stat().st_ino == (
        venv / "lib" / VERSION / "site-packages" / "beta.py"
    ).stat().st_ino


def test_the_key_changes_with_a_distribution_s_record(
    venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sitelayer, "ROOTS", ("alpha",))
    before = sitelayer.key(venv)
    record = venv / "lib" / VERSION / "site-packages" / "delta-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "delta2.py,sha256=x,1\n")
    assert sitelayer.key(venv) != before
    assert sitelayer.key(venv) == sitelayer.key(venv)


def test_the_key_is_the_same_for_a_virtualenv_elsewhere(
    venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A console script's #! line names its virtualenv, and RECORD its digest.
    monkeypatch.setattr(sitelayer, "ROOTS", ("alpha",))
    record = venv / "lib" / VERSION / "site-packages" / "beta-1.0.dist-info" / "RECORD"
    text = record.read_text().replace("../../../bin/beta-cli,,", "../../../bin/beta-cli,sha256=A,9")
    record.write_text(text)
    before = sitelayer.key(venv)
    record.write_text(text.replace("sha256=A,9", "sha256=B,9"))
    assert sitelayer.key(venv) == before


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("horovod/horovod:0.28.1", "docker.io/horovod/horovod:0.28.1"),
        ("busybox:1", "docker.io/library/busybox:1"),
        ("registry.k8s.io/pause:3.10.1", "registry.k8s.io/pause:3.10.1"),
        ("localhost/x:1", "localhost/x:1"),
    ],
)
def test_an_archive_names_its_image_as_the_cri_looks_it_up(
    tmp_path: Path, name: str, normalized: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    layer = imagestore.layer_from_dir(root, tmp_path / "layer.tar")
    config = imagestore.ImageConfig(cmd=["/bin/sh"])
    archive = imagestore.write_archive(
        tmp_path / "a.tar", [imagestore.Named(name, [layer], config)]
    )
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == normalized


def test_a_name_without_a_tag_or_a_registry_is_normalized_as_containerd_names_it() -> None:
    assert imagestore.normalized("ubuntu") == "docker.io/library/ubuntu:latest"
    assert imagestore.normalized("localhost/train") == "localhost/train:latest"
    assert imagestore.normalized("registry.example.com:5000/ml/train:3f2a") == (
        "registry.example.com:5000/ml/train:3f2a"
    )


def test_a_node_root_links_the_seed_s_files_and_copies_its_databases(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    blob = seed / "io.containerd.content.v1.content" / "blobs" / "sha256" / "ab"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"layer")
    for name in seedroot.DATABASES:
        (seed / name).parent.mkdir(parents=True, exist_ok=True)
        (seed / name).write_bytes(b"bolt")
    root = tmp_path / "run" / "node-1" / "containerd"
    seedroot.clone(seed, root)
    assert (root / blob.relative_to(seed)).stat().st_ino == blob.stat().st_ino
    for name in seedroot.DATABASES:
        assert (root / name).read_bytes() == b"bolt"
        assert (root / name).stat().st_ino != (seed / name).stat().st_ino
        (root / name).write_bytes(b"written by the node")
        assert (seed / name).read_bytes() == b"bolt"


def test_the_seed_key_is_containerd_s_version_and_the_sources_keys() -> None:
    one = [Source("a", lambda _: Path()), Source("b", lambda _: Path())]
    assert seedroot.key(one) == seedroot.key(list(one))
    assert seedroot.key(one) != seedroot.key(one[:1])
    assert seedroot.key(one) != seedroot.key(list(reversed(one)))


def test_the_stock_python_layer_hides_python3_ensurepip_and_the_site_layers_pip(
    tmp_path: Path,
) -> None:
    wheel = tmp_path / "pip-21.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pip/__init__.py", "__version__ = '21.0.1'\n")
        archive.writestr("pip-21.0.1.dist-info/METADATA", "Name: pip\nVersion: 21.0.1\n")
    root = tmp_path / "layer"
    nodeimages._stock_python_tree(root, wheel, ["pip", "pip-26.3.dist-info"])
    dist = f"usr/local/lib/{VERSION}/dist-packages"
    entries = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
    assert entries == sorted(
        [
            "usr/bin/.wh.python3",
            "usr/bin/python",
            f"usr/lib/{VERSION}/.wh.ensurepip",
            f"{dist}/.wh.pip-26.3.dist-info",
            f"{dist}/pip-21.0.1.dist-info/METADATA",
            f"{dist}/pip/.wh..wh..opq",
            f"{dist}/pip/__init__.py",
            "usr/local/bin/pip",
            "usr/local/bin/pip3",
            f"usr/local/bin/pip{VERSION.removeprefix('python')}",
        ]
    )
    assert os.readlink(root / "usr" / "bin" / "python") == VERSION
    assert (root / "usr/local/bin/pip").read_text().splitlines()[:3] == [
        f"#!/usr/bin/{VERSION}",
        "import sys",
        "from pip._internal.cli.main import main",
    ]


def test_prune_removes_the_archives_of_older_keys_only(tmp_path: Path) -> None:
    for name in ("old.tar", "pause.tar", "busybox.tar", "notes.txt"):
        (tmp_path / name).write_text(name)
    (tmp_path / "being-written").mkdir()
    imagestore.prune([tmp_path / "pause.tar", tmp_path / "busybox.tar"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "being-written",
        "busybox.tar",
        "notes.txt",
        "pause.tar",
    ]


def test_a_layer_keeps_its_files_times_only_when_asked(tmp_path: Path) -> None:
    """The site layer keeps them: a module whose time differs from the one its .pyc records is
    compiled again by every container that imports it."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "module.py").write_text("x = 1\n")
    os.utime(root / "module.py", (1_700_000_000, 1_700_000_000))
    kept = imagestore.layer_from_dir(root, tmp_path / "kept.tar", keep_times=True)
    zeroed = imagestore.layer_from_dir(root, tmp_path / "zeroed.tar")
    with tarfile.open(kept) as tar:
        assert tar.getmember("./module.py").mtime == 1_700_000_000
    with tarfile.open(zeroed) as tar:
        assert tar.getmember("./module.py").mtime == 0


def _pem(body: str, width: int = 64) -> str:
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    return "\n".join(["-----BEGIN CERTIFICATE-----", *lines, "-----END CERTIFICATE-----"])


DEBIANS = _pem("A" * 100)  # a certificate both bundles have
PROXYS = _pem("B" * 100)  # one only this machine trusts


def test_the_extra_certificates_are_the_hosts_the_image_lacks_once_each() -> None:
    # The same certificate with other line breaks is the image's; a comment is no certificate.
    host = f"# Issuer: proxy\n{_pem('A' * 100, 76)}\n{PROXYS}\n{PROXYS}\n"
    assert nodeimages.extra_certificates(f"{DEBIANS}\n", host) == [PROXYS]
    assert nodeimages.extra_certificates(f"{DEBIANS}\n{PROXYS}\n", host) == []


def test_the_ca_layer_is_the_images_bundle_with_this_machines_extra_cas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, host = tmp_path / "image.crt", tmp_path / "host.crt"
    image.write_text(f"{DEBIANS}\n")
    host.write_text(f"{DEBIANS}\n{PROXYS}\n")
    monkeypatch.setenv("PIP_CERT", str(host))
    assert nodeimages._ca_tree(tmp_path / "layer", image)
    files = [p for p in (tmp_path / "layer").rglob("*") if p.is_file()]
    assert files == [tmp_path / "layer" / "etc/ssl/certs/ca-certificates.crt"]
    assert files[0].read_text() == f"{DEBIANS}\n{PROXYS}\n"
    assert files[0].stat().st_mode & 0o777 == 0o644


def test_no_ca_layer_without_an_extra_ca_or_without_a_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = tmp_path / "image.crt"
    image.write_text(f"{DEBIANS}\n")
    monkeypatch.setenv("PIP_CERT", str(image))
    assert not nodeimages._ca_tree(tmp_path / "same", image)
    monkeypatch.delenv("PIP_CERT")
    monkeypatch.setattr(image_check, "SYSTEM_BUNDLE", tmp_path / "absent.crt")
    assert not nodeimages._ca_tree(tmp_path / "none", image)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image.crt"]


@pytest.mark.parametrize("ca", [True, False])
def test_every_image_has_the_ca_layer_right_above_the_base(tmp_path: Path, ca: bool) -> None:
    names = ("base", "sshd", "account", "stock", "trojan", "uv", "ca")
    paths = {name: tmp_path / f"{name}.tar" for name in names}
    base, sshd, account, stock, trojan, uv = (paths[n] for n in names[:6])
    layers = nodeimages.Layers(base, sshd, account, stock, trojan, uv, paths["ca"] if ca else None)
    images = nodeimages._images(layers, tmp_path / "site.tar")
    lowest = [paths["base"], paths["ca"]] if ca else [paths["base"]]
    below_sshd = [list(image.layers[: len(lowest) + 1]) for image in images]
    assert below_sshd == [[*lowest, paths["sshd"]]] * len(images)
    assert layers.written()[4:] == [paths["uv"], *([paths["ca"]] if ca else [])]
    # uv in the setup image (the tests' MPI_IMAGE) alone, as ci-runner's image has it.
    assert [image.name for image in images if paths["uv"] in image.layers] == [nodeimages.MPI_IMAGE]
