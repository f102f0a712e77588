"""Images built from Debian packages (testing/emulated_cluster/nodeimages.py) on a real node:
what the image says (WORKDIR, USER, its Python, OpenMPI and sshd) is what the container gets,
with the runtime's default capabilities (slow: debootstrap once, real pods; root)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.emulated_cluster import nodeimages
from testing.emulated_cluster.harness import Emulated, emulated, main_status, phase_is, pod

pytestmark = pytest.mark.slow
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Emulated]:
    with emulated(nodes=1) as running:
        yield running


def run(cluster: Emulated, name: str, image: str, script: str, **spec: Any) -> tuple[JSON, str]:
    main = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", script],
    }
    cluster.create("pods", pod(name, "node-1", [main], restartPolicy="Never", **spec))
    done = cluster.wait_pod(name, phase_is("Succeeded", "Failed"), timeout=60)
    return done, cluster.api.text(f"/api/v1/namespaces/ml/pods/{name}/log")


def test_the_debian_image_has_python_openmpi_and_sshd_in_its_workdir_with_default_caps(
    cluster: Emulated,
) -> None:
    script = (
        "python3 --version; mpirun --version | head -n1; /usr/sbin/sshd -t && echo sshd ok; "
        "pwd; id -u; grep CapEff /proc/self/status"
    )
    done, log = run(cluster, "debian", nodeimages.MPI_IMAGE, script)
    assert (done["status"]["phase"], log.splitlines()) == (
        "Succeeded",
        [
            "Python 3.11.2",
            "mpirun (Open MPI) 4.1.4",
            "sshd ok",
            "/horovod/examples",
            "0",
            "CapEff:\t00000000a80425fb",
        ],
    )


def test_the_non_root_variant_runs_as_its_numeric_user_under_run_as_non_root(
    cluster: Emulated,
) -> None:
    done, log = run(
        cluster,
        "non-root",
        nodeimages.NON_ROOT_IMAGE,
        "id -u; echo $HOME; ls -ld $HOME/.ssh | cut -d' ' -f1,3",
        securityContext={"runAsNonRoot": True},
    )
    assert (done["status"]["phase"], log.splitlines()) == (
        "Succeeded",
        ["1000", "/home/mpiuser", "drwx------ mpiuser"],
    )


def test_run_as_non_root_refuses_the_root_image_before_it_starts(cluster: Emulated) -> None:
    main = {"name": "main", "image": nodeimages.MPI_IMAGE, "command": ["true"]}
    spec = pod("refused", "node-1", [main], securityContext={"runAsNonRoot": True})
    cluster.create("pods", spec)
    waiting = cluster.wait_pod(
        "refused",
        lambda p: (
            (main_status(p).get("state") or {}).get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
        ),
    )
    message = main_status(waiting)["state"]["waiting"]["message"]
    uid = waiting["metadata"]["uid"]
    assert message == (
        "container has runAsNonRoot and image will run as root "
        f'(pod: "refused_ml({uid})", container: main)'
    )


def test_the_horovod_image_has_torch_and_horovod_built_with_pytorch_gloo_and_mpi(
    cluster: Emulated,
) -> None:
    script = (
        "command -v python; command -v horovodrun; echo $PATH; "
        "python -c 'import torch, horovod.torch; print(torch.__version__, horovod.__version__)'; "
        "horovodrun --check-build | grep -F '[X]' | sed 's/ *$//'; "
        "ls /usr/lib/python3*/EXTERNALLY-MANAGED 2>/dev/null || echo no PEP 668 marker"
    )
    done, log = run(cluster, "horovod", nodeimages.HOROVOD_IMAGE, script)
    assert (done["status"]["phase"], log.splitlines()) == (
        "Succeeded",
        [
            "/usr/bin/python",
            "/usr/local/bin/horovodrun",
            "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
            "/usr/bin:/sbin:/bin",
            # PyPI's torch is the CUDA build; without a GPU it runs on the CPU.
            "2.13.0+cu130 0.28.1",
            "    [X] PyTorch",  # frameworks
            "    [X] MPI",  # controllers
            "    [X] Gloo",
            "    [X] MPI",  # tensor operations
            "    [X] Gloo",
            "no PEP 668 marker",  # root's pip installs into the system, as in the stock image
        ],
    )


def test_the_non_root_horovod_image_imports_torch_as_its_user(cluster: Emulated) -> None:
    done, log = run(
        cluster,
        "horovod-non-root",
        nodeimages.HOROVOD_NON_ROOT_IMAGE,
        "id -u; python -c 'import horovod.torch as hvd; hvd.init(); print(hvd.size())'",
        securityContext={"runAsNonRoot": True},
    )
    assert (done["status"]["phase"], log.splitlines()) == ("Succeeded", ["1000", "1"])
