"""`ci-runner train` as an MR pipeline runs it, against the emulated cluster with real nodes
(kubelet v1.35.4, containerd, runc, CNI, CoreDNS; slow): every init container, sshd, probe, DNS
lookup and the real ``horovodrun`` (MPI over ssh between pods) run in the Horovod image built
from Debian's packages (testing/emulated_cluster/nodeimages.py), on a real memory limit; see
testing/emulated_pipeline.py for what else is real.
"""

from __future__ import annotations

import io
import re
import subprocess
import time
import zipfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from testing.control_plane import accounts
from testing.control_plane.run import OPERATOR_NETNS
from testing.emulated_cluster import cleanup, nodeimages
from testing.emulated_cluster.harness import NAMESPACE, busybox, claim_directory
from testing.emulated_cluster.nodeimages import (
    HOROVOD_NON_ROOT_IMAGE,
    NON_ROOT_UID,
    STOCK_PYTHON_IMAGE,
)
from testing.emulated_cluster.stockpip import STOCK_PIP
from testing.emulated_pipeline import (
    MARGIN,
    SUBMITTED,
    Pipeline,
    Run,
    Site,
    assert_failed,
    assert_trained,
    ddp_train_yaml,
    failure_line,
    finish,
    job_kind,
    job_name,
    pipeline,
    read_until,
    running_site,
    train,
    train_yaml,
)
from testing.host import marks, network

pytestmark = pytest.mark.slow
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("emulated-e2e")) as running:
        yield running


def test_the_example_trains_on_two_workers_over_ssh_between_pods(site: Site) -> None:
    run = train(site, "plain", train_yaml())
    assert_trained(run, "plain")


def test_with_dns_config_nameservers_the_launcher_still_resolves_the_workers(site: Site) -> None:
    # dnsPolicy None: the pods get only what dnsConfig says, plus the cluster domain's searches.
    run = train(site, "dns", train_yaml(dns_config={"nameservers": [marks.GATEWAY]}))
    assert_trained(run, "dns")


def test_sshd_on_port_2222(site: Site) -> None:
    run = train(site, "port", train_yaml(ssh_port=2222))
    assert_trained(run, "port")


def test_a_torchrun_job_trains_the_ddp_example_on_two_pods_with_gloo(site: Site) -> None:
    # An Indexed Job of two pods and its headless Service: node 1 finds node 0's torchrun through
    # CoreDNS (<job>-0.<job>.<namespace>.svc) and both train with gloo over the pods' network.
    run = train(site, "ddp", ddp_train_yaml())
    assert_trained(run, "ddp")
    name = job_name(run.log)
    assert job_kind(run.log) == "Job"
    assert f"[ci-runner] Job {name} succeeded" in run.log, "\n".join(run.log)
    # Both ranks' loss series in the comment's chart, and the Job named as such.
    assert 'line "rank 0"' in run.comment and 'line "rank 1"' in run.comment, run.comment
    assert f"Indexed Job `{name}`" in run.comment, run.comment
    assert_nothing_left(site, NAMESPACE, name)


# A rank that raises after the process group is up: rank 1, line 7; rank 0 then loses its peer.
RAISES = b"""import torch.distributed as dist

dist.init_process_group(backend="gloo")
dist.barrier()
print("both ranks joined", flush=True)
if dist.get_rank() == 1:
    raise ValueError("boom")
dist.barrier()
"""


def test_a_torchrun_rank_that_raises_is_named_with_its_exception_and_where(site: Site) -> None:
    config = ddp_train_yaml()
    config["command"] = "python raises.py"
    run = train(site, "ddp-raises", config, {"raises.py": RAISES})
    text = "\n".join(run.log)
    assert run.code == 1, text
    assert "rank 1 raised ValueError: boom (raises.py:7)" in failure_line(run), text
    assert "rank 1 raised ValueError: boom (raises.py:7)" in run.comment, run.comment
    assert "### ❌ Training failed: `simple-ml`" in run.comment, run.comment
    # The ranks' tracebacks and torchrun's own (its ChildFailedError, untagged) are the node's
    # log; ci-runner itself raised nothing.
    assert not any("ci_runner" in line for line in run.log if line.startswith("  File ")), text
    assert_nothing_left(site, NAMESPACE, job_name(run.log))


def pth_wheel() -> bytes:
    """A wheel whose package imports a module that only a .pth file puts on sys.path, with a
    console script: what PYTHONPATH alone would not make work."""
    info = "pthpkg-1.0.dist-info"
    files = {
        "pthpkg/__init__.py": "",
        "pthpkg/cli.py": (
            "import os\n\nimport pth_target\n\n\ndef main():\n"
            "    rank = os.environ['OMPI_COMM_WORLD_RANK']\n"
            "    print(f'pth-hello rank {rank} {pth_target.WHAT}', flush=True)\n"
        ),
        "pthpkg.pth": "pth_extra\n",
        "pth_extra/pth_target.py": "WHAT = 'found through a .pth file'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: pthpkg\nVersion: 1.0\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{info}/entry_points.txt": "[console_scripts]\npth-hello = pthpkg.cli:main\n",
    }
    record = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(path, text)
    return buffer.getvalue()


def test_a_local_path_requirement_with_a_pth_file_and_a_console_script(site: Site) -> None:
    config = train_yaml()
    config["requirements"] = "requirements.txt"
    config["command"] = "sh -c 'pth-hello && exec python examples/simple_ml/main_with_horovod.py'"
    requirements = b"-r examples/simple_ml/requirements.txt\n./libs/pthpkg-1.0-py3-none-any.whl\n"
    run = train(
        site,
        "pth",
        config,
        {"requirements.txt": requirements, "libs/pthpkg-1.0-py3-none-any.whl": pth_wheel()},
    )
    assert_trained(run, "pth")
    for rank in (0, 1):
        assert any(
            line.endswith(f"pth-hello rank {rank} found through a .pth file") for line in run.log
        ), "\n".join(run.log)


# The commit's package: what the rank's Python sees (the virtualenv install-requirements.sh made)
# and what the image's PATH has without it.
STOCK_CHECK = """\
import importlib.metadata, importlib.util, os, shutil, sys


def main():
    image_path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not d.startswith(sys.prefix)
    )
    print(
        "stockpkg", importlib.metadata.version("stockpkg"), "in", sys.prefix,
        "rank", os.environ["OMPI_COMM_WORLD_RANK"],
        "pip", importlib.metadata.version("pip"),
        "ensurepip", importlib.util.find_spec("ensurepip"),
        "python3", shutil.which("python3", path=image_path),
        flush=True,
    )
"""


def test_the_stock_images_python_branch_installs_a_local_package_with_its_old_pip(
    site: Site,
) -> None:
    # The variant image has `python` only (no python3), no ensurepip and pip 21.0.1, as
    # horovod/horovod:0.28.1: install-requirements.sh takes `command -v python`, makes the
    # virtualenv --without-pip and runs the image's pip through the system site packages, which
    # builds the commit's setup.py-only package (pip's legacy, pre-PEP 517 path).
    config = train_yaml()
    config["image"] = STOCK_PYTHON_IMAGE
    config["requirements"] = "requirements.txt"
    config["command"] = "sh -c 'stock-check && exec python examples/simple_ml/main_with_horovod.py'"
    setup = (
        "from setuptools import setup\n\n"
        "setup(name='stockpkg', version='1.0', py_modules=['stockpkg'],\n"
        "      entry_points={'console_scripts': ['stock-check = stockpkg:main']})\n"
    )
    files = {
        "requirements.txt": b"-r examples/simple_ml/requirements.txt\n./libs/stockpkg\n",
        "libs/stockpkg/setup.py": setup.encode(),
        "libs/stockpkg/stockpkg.py": STOCK_CHECK.encode(),
    }
    run = train(site, "stock", config, files)
    assert_trained(run, "stock")
    version = STOCK_PIP.split("==")[1]
    assert sorted(line for line in run.log if "stockpkg" in line) == [
        f"[1,{rank}]<stdout>:stockpkg 1.0 in /ci-runner/venv rank {rank} pip {version} "
        "ensurepip None python3 None"
        for rank in (0, 1)
    ], "\n".join(run.log)


# The commit's package, built by a backend that is in no cache: the installer (uv, from the setup
# image, or pip) fetches it from the package index into the build's isolated environment, over
# TLS the image must trust (this machine's CAs, testing/emulated_cluster/nodeimages.py). A rank
# prints the generator its wheel names.
FLIT_CORE = "3.12.0"
FLIT_PACKAGE = {
    "requirements.txt": b"-r examples/simple_ml/requirements.txt\n./libs/flitpkg\n",
    "libs/flitpkg/pyproject.toml": (
        f'[build-system]\nrequires = ["flit_core=={FLIT_CORE}"]\n'
        'build-backend = "flit_core.buildapi"\n\n[project]\nname = "flitpkg"\nversion = "1.0"\n'
        'description = "built by a backend from the index"\n'
    ).encode(),
    "libs/flitpkg/flitpkg.py": (
        b"import importlib.metadata, os\n\n"
        b"wheel = importlib.metadata.distribution('flitpkg').read_text('WHEEL').splitlines()\n"
        b"print('flitpkg rank', os.environ['OMPI_COMM_WORLD_RANK'], wheel[1], flush=True)\n"
    ),
}


def test_a_local_package_whose_build_backend_comes_from_the_index(site: Site) -> None:
    config = train_yaml()
    env = config["env"]
    assert isinstance(env, dict)
    del env["PIP_NO_INDEX"]
    config["requirements"] = "requirements.txt"
    config["command"] = (
        "sh -c 'python -m flitpkg && exec python examples/simple_ml/main_with_horovod.py'"
    )
    run = train(site, "flit", config, FLIT_PACKAGE)
    assert_trained(run, "flit")
    assert sorted(line for line in run.log if "flitpkg rank" in line) == [
        f"[1,{rank}]<stdout>:flitpkg rank {rank} Generator: flit {FLIT_CORE}" for rank in (0, 1)
    ], "\n".join(run.log)


ENFORCE = "pod-security.kubernetes.io/enforce"


def enforcing(site: Site, namespace: str, level: str) -> None:
    """``namespace``, whose PodSecurity admission enforces ``level``."""
    accounts.create_namespace(site.cluster.api, namespace)
    labels = {"metadata": {"labels": {ENFORCE: level}}}
    site.cluster.api.merge_patch(f"/api/v1/namespaces/{namespace}", labels)


# The example's command, after each rank says which user it runs as.
AS_USER = "sh -c 'echo rank uid $(id -u) && exec python examples/simple_ml/main_with_horovod.py'"


def test_a_namespace_enforcing_baseline_trains_the_stock_image_with_root_workers(
    site: Site,
) -> None:
    enforcing(site, "baseline", "baseline")
    config = train_yaml(namespace="baseline")
    config["command"] = AS_USER
    run = train(site, "baseline", config, namespace="baseline")
    assert_trained(run, "baseline")
    assert sorted(line for line in run.log if "rank uid" in line) == [
        "[1,0]<stdout>:rank uid 0",
        "[1,1]<stdout>:rank uid 0",
    ], "\n".join(run.log)


def test_a_namespace_enforcing_restricted_trains_the_non_root_image_as_its_user(
    site: Site,
) -> None:
    enforcing(site, "restricted", "restricted")
    config = train_yaml(namespace="restricted", run_as_user=NON_ROOT_UID, ssh_port=2222)
    config["image"] = HOROVOD_NON_ROOT_IMAGE
    config["command"] = AS_USER
    run = train(site, "restricted", config, namespace="restricted")
    assert_trained(run, "restricted")
    assert sorted(line for line in run.log if "rank uid" in line) == [
        f"[1,0]<stdout>:rank uid {NON_ROOT_UID}",
        f"[1,1]<stdout>:rank uid {NON_ROOT_UID}",
    ], "\n".join(run.log)


# Failures, as real pods fail: the CI log and the comment say why, and the job exits 1.


def test_a_requirement_pip_cannot_find_fails_with_pips_error(site: Site) -> None:
    config = train_yaml()
    config["requirements"] = "requirements.txt"
    files = {"requirements.txt": b"no-such-package-anywhere==9.9\n"}
    run = train(site, "nopkg", config, files)
    job, message = job_name(run.log), failure_line(run)
    worker = re.fullmatch(rf"worker ({job}-worker-[01]): .*", message)
    assert worker is not None, message
    assert message == (
        f"worker {worker[1]}: init container install-requirements exited with code 1: "
        f"ci-runner: pip could not install requirements.txt at commit {run.sha} (its output is "
        "above); fix: correct the requirements file, or set PIP_INDEX_URL in train.yaml env"
    )
    assert "ERROR: No matching distribution found for no-such-package-anywhere==9.9" in run.log, (
        "\n".join(run.log)
    )
    assert_failed(run, "no-such-package-anywhere")


def test_a_gpu_no_node_has_fails_after_unschedulable_timeout(site: Site) -> None:
    config = train_yaml(unschedulable_timeout="3s")
    config["resources"] = {"gpu": 1}
    run = train(site, "gpu", config)
    job, message = job_name(run.log), failure_line(run)
    scheduler = (  # kube-scheduler v1.35.4's own words
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. no new claims to deallocate, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    assert f"[ci-runner] workers pending: {scheduler}" in run.log, "\n".join(run.log)
    found = re.fullmatch(rf"pod {job}-worker-[01] stayed unschedulable for (\d+)s: (.*)", message)
    assert found is not None and int(found[1]) >= 3 and found[2] == scheduler, message
    assert_failed(run, "Insufficient nvidia.com/gpu")


def test_a_training_command_that_exits_non_zero(site: Site) -> None:
    config = train_yaml()
    config["command"] = "python -c 'import sys; print(\"giving up\", flush=True); sys.exit(3)'"
    run = train(site, "exit3", config)
    message = failure_line(run)
    # mpirun ends with the first failed rank's exit code, and so does the launcher.
    assert re.fullmatch(
        rf"launcher {job_name(run.log)}-launcher-[a-z0-9]{{5}} exited with code 3", message
    )
    assert {"[1,0]<stdout>:giving up", "[1,1]<stdout>:giving up"} <= set(run.log)
    assert "  Exit code:    3" in run.log, "\n".join(run.log)  # mpirun's own report
    assert_failed(run, message)


# Each rank looks for the git token (given reversed, so that no file holds it for being the
# needle) in every file it can read on the pod's volumes, /tmp and its environment, and says so.
LEAK_CHECK = """\
import os
import sys

needle = os.environ["LEAK_NEEDLE"][::-1].encode()
found = [f"env {k}" for k, v in os.environb.items() if needle in v]
for root in ("/ci-runner", "/ci-runner-cache", "/ci-runner-git", "/tmp"):
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as file:
                    if needle in file.read():
                        found.append(path)
            except OSError:
                pass
if os.path.exists("/ci-runner-git"):
    found.append("/ci-runner-git exists")
print("leak check:", " ".join(found) or "clean", flush=True)
sys.exit(1 if found else 0)
"""


def test_train_yamls_git_attack_leaves_no_token_where_a_rank_reads(site: Site) -> None:
    # The attack: git configuration through env, a hook that copies the token onto the
    # volume every rank reads, and the token asked of the kubelet by name.
    token = "glcbt-emulated-job-token"  # the pipeline's CI_JOB_TOKEN: the Secret's GIT_PASSWORD
    config = train_yaml()
    config["env"] = {
        **config["env"],  # type: ignore[dict-item]
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": "printenv GIT_PASSWORD > /ci-runner/leak; printenv > /ci-runner/env; "
        "cat /ci-runner-git/password > /ci-runner/file; false",
        "GIT_CONFIG_KEY_1": "credential.helper",
        "GIT_CONFIG_VALUE_1": "!printenv > /ci-runner/helper-env; :",
        "GIT_TRACE": "/ci-runner/trace",
        "STOLEN": "$(GIT_PASSWORD)",
        "LEAK_NEEDLE": token[::-1],
    }
    config["command"] = "python leak_check.py"
    run = train(site, "leak", config, {"leak_check.py": LEAK_CHECK.encode()})
    text = "\n".join(run.log)
    verdicts = [line for line in run.log if "<stdout>:leak check:" in line]
    assert sorted(v.split("<stdout>:", 1)[1] for v in verdicts) == ["leak check: clean"] * 2, text
    assert token not in text and token not in run.comment


# Each rank runs the image's git itself (the trojan, which then finds no credential), and says
# what the trojan took and every time it ran in its pod.
TROJAN_CHECK = f"""\
import os
import subprocess
import sys

subprocess.run(["git", "--version"], check=True, stdout=subprocess.DEVNULL)
stolen = b""
if os.path.exists("{nodeimages.STOLEN}"):
    with open("{nodeimages.STOLEN}", "rb") as file:
        stolen = file.read()
with open("{nodeimages.STOLEN}.log") as file:
    ran = file.read().splitlines()
verdict = f"stolen {{stolen!r}}" if stolen else "nothing stolen"
print("trojan check:", verdict, "|", *ran, flush=True)
sys.exit(1 if stolen else 0)
"""


def test_a_trojan_git_in_train_yamls_image_never_runs_with_the_git_token(site: Site) -> None:
    # The image's git is first on its PATH and reads what it can of the credential. The fetch
    # runs in the project's setup image, and nothing else in train.yaml's image runs git: the
    # trojan runs only when a rank calls it, in a container without the credential.
    config = train_yaml()
    config["image"] = nodeimages.TROJAN_GIT_IMAGE
    config["command"] = "python trojan_check.py"
    run = train(site, "trojan", config, {"trojan_check.py": TROJAN_CHECK.encode()})
    text = "\n".join(run.log)
    verdicts = [
        line.split("<stdout>:", 1)[1] for line in run.log if "<stdout>:trojan check:" in line
    ]
    assert verdicts == ["trojan check: nothing stolen | trojan git ran: --version"] * 2, text
    assert run.code == 0, text


# What a rank sees on the pip cache claim of what other runs left, then a file of its own left
# there for the next.
CACHE_LOOK = """\
import os

run = os.environ["RUN"]
names = os.listdir("/ci-runner-cache")
left = sorted(n for n in names if n.startswith("left-by-") and not n.startswith(f"left-by-{run}-"))
print("cache:", *left or ["nothing left"], flush=True)
open(f"/ci-runner-cache/left-by-{run}-{os.environ['OMPI_COMM_WORLD_RANK']}", "w").close()
"""


def test_a_protected_ref_never_runs_what_an_unprotected_one_kept_in_the_pip_cache(
    site: Site,
) -> None:
    # Every rank and pip of an unprotected branch write to the claim: a protected ref's pods
    # mount another directory of it, and install their own virtualenv.
    site.cluster.bound_claim("shared-cache", ["ReadWriteMany"])
    claim = claim_directory("shared-cache")
    cache = {"pip_cache_pvc": "shared-cache", "pip_cache_access_mode": "ReadWriteMany"}
    files = {"cache_look.py": CACHE_LOOK.encode()}

    def run(name: str, protected: str) -> list[str]:
        config = train_yaml(**cache)
        config["command"] = "python cache_look.py"
        config["env"] = {**config["env"], "RUN": name}  # type: ignore[dict-item]
        done = train(site, name, config, files, variables={"CI_COMMIT_REF_PROTECTED": protected})
        assert done.code == 0, "\n".join(done.log)
        return sorted({line.split("<stdout>:", 1)[1] for line in done.log if ":cache:" in line})

    assert run("branch", "false") == ["cache: nothing left"]
    assert run("main", "true") == ["cache: nothing left"]  # nothing of the branch's
    assert run("branch-2", "false") == ["cache: left-by-branch-0 left-by-branch-1"]
    assert sorted(p.name for p in claim.iterdir()) == ["protected", "unprotected"]
    for half in ("protected", "unprotected"):
        kept = list((claim / half / "venvs").iterdir())
        assert [p for p in kept if (p / ".ci-runner-complete").exists()], half


def test_a_rank_over_the_workers_memory_limit_is_named(site: Site) -> None:
    # On this cgroup v1 host the kernel kills the rank alone (the runtime's memory limit, no group
    # kill; sshd, the container's main process, lives on): no pod says OOMKilled, only mpirun's
    # report of the signal does. cgroup v2's group kill is the scripted cluster's case.
    config = train_yaml()
    config["resources"] = {"memory": "300Mi"}
    config["command"] = "python -c 'b = bytearray(2 << 30); print(len(b))'"
    run = train(site, "oom", config)
    job, message = job_name(run.log), failure_line(run)
    found = re.fullmatch(
        rf"rank ([01]) on ({job}-worker-[01]) was killed by signal 9 \(Killed\), most likely for "
        r"going over the workers' memory limit of 300Mi \(on cgroup v1 the kernel kills that rank "
        rf"alone; sshd lives on\); launcher {job}-launcher-[a-z0-9]{{5}} exited with code 137; "
        r"fix: raise resources\.memory, or use less memory per rank \(what ranks write to "
        r"/dev/shm counts too\)",
        message,
    )
    assert found is not None, message
    assert_failed(run, message)


def _runner_at_script_timeout() -> dict[str, str]:
    """What GitLab Runner gives after_script when RUNNER_SCRIPT_TIMEOUT stopped the script
    (gitlab-runner common/build.go: executeAfterScript, runtimeStateAndError)."""
    started = datetime.now(timezone.utc) - timedelta(minutes=55)
    return {
        "CI_JOB_STATUS": "timedout",
        "CI_JOB_TIMEOUT": "3600",
        "RUNNER_SCRIPT_TIMEOUT": "55m",
        "RUNNER_AFTER_SCRIPT_TIMEOUT": "5m",
        "CI_JOB_STARTED_AT": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


@pytest.mark.parametrize("status", ["canceled", "timedout"])
def test_a_cancelled_or_timed_out_job_leaves_no_pod_and_no_process(site: Site, status: str) -> None:
    # GitLab stops the job's script (SIGTERM may never reach it), then runs after_script, which
    # calls `ci-runner cancel` with CI_JOB_STATUS=canceled or timedout (templates/train.yml).
    config = train_yaml()
    config["env"] = {**config["env"], "EPOCHS": "100000"}  # type: ignore[dict-item]
    job = pipeline(site, f"stop-{status}", config)
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    deadline = time.monotonic() + 60  # the earlier tests' pods end within their grace period
    while site.cluster.api.list(pods)[0]:
        assert time.monotonic() < deadline, site.cluster.api.list(pods)[0]
        time.sleep(0.2)
    before = set(cleanup.our_processes())  # the cluster's own: control plane, dnsmasq
    train = job.start("train")
    assert train.stdout is not None
    seen = []
    for line in train.stdout:
        seen.append(line)
        if "Training. Epoch 1," in line:
            break
    else:
        raise AssertionError("".join(seen))
    train.kill()
    train.wait(10)
    assert set(cleanup.our_processes()) > before  # the pods' sshd, ranks and orted live on

    after_script = (
        {"CI_JOB_STATUS": "canceled"} if status == "canceled" else _runner_at_script_timeout()
    )
    cancel = job.start("cancel", **after_script)
    output, _ = cancel.communicate(timeout=120)
    assert cancel.returncode == 0, output
    name = job_name([line.rstrip("\n") for line in seen])
    done = "cancelled" if status == "canceled" else "timed out"
    assert f"[ci-runner] {done}: MPIJob {name} and everything it owned deleted" in (
        output.splitlines()
    )
    # Deleted means terminating: the kubelet stops each pod within its grace period, then the
    # pod is gone, and with it every process and network namespace it had.
    left = site.cluster.api.list(pods)[0]
    assert all(pod["metadata"].get("deletionTimestamp") for pod in left), left
    deadline = time.monotonic() + 60
    while (
        site.cluster.api.list(pods)[0]
        or set(cleanup.our_processes()) - before
        or set(network.our_netns()) - {OPERATOR_NETNS}
    ):
        assert time.monotonic() < deadline, (cleanup.inventory(), before)
        time.sleep(0.2)
    comment, _ = job.notes()  # "Training started", edited; then the result's reply
    if status == "canceled":
        assert "### 🚫 Training cancelled" in comment, comment
    else:
        assert "### ❌ Training failed" in comment, comment
        reason = (
            r"\*\*Reason:\*\* `the CI job timed out after 55m(\d+s)? \(RUNNER_SCRIPT_TIMEOUT 55m\)`"
        )
        assert re.search(reason, comment), comment
        assert "Training. Epoch 1," in comment  # the log tail it has


# Issue 24 on the real control plane: quotas, disruptions, a killed CI job.

QUOTA = {"requests.cpu": "8", "requests.memory": "16Gi", "limits.cpu": "8", "limits.memory": "16Gi"}
JOB_KINDS = {
    "mpijobs": "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs",
    "pods": "/api/v1/namespaces/{ns}/pods",
    "services": "/api/v1/namespaces/{ns}/services",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "secrets": "/api/v1/namespaces/{ns}/secrets",
    "jobs": "/apis/batch/v1/namespaces/{ns}/jobs",
}


def quota_namespace(site: Site, namespace: str, defaults: dict[str, str] | None = None) -> None:
    """``namespace`` with a ResourceQuota on cpu and memory requests and limits, and with
    ``defaults`` a LimitRange that gives every container them as its default request and limit."""
    api = site.cluster.api
    accounts.create_namespace(api, namespace)
    base = f"/api/v1/namespaces/{namespace}"
    if defaults is not None:
        limits = {"type": "Container", "default": defaults, "defaultRequest": defaults}
        limit_range = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"}}
        api.create(f"{base}/limitranges", {**limit_range, "spec": {"limits": [limits]}})
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"}}
    api.create(f"{base}/resourcequotas", {**quota, "spec": {"hard": QUOTA}})
    # Quota admission refuses every pod until the resourcequota controller has written its usage.
    deadline = time.monotonic() + 30
    while not ((api.get(f"{base}/resourcequotas/compute") or {}).get("status") or {}).get("hard"):
        assert time.monotonic() < deadline, "the ResourceQuota never got its status"
        time.sleep(0.2)


def left_of(site: Site, namespace: str, job: str) -> dict[str, list[str]]:
    """What of the MPIJob ``job`` is in ``namespace``: every object named after it, by kind."""
    left = {}
    for kind, path in JOB_KINDS.items():
        items, _ = site.cluster.api.list(path.format(ns=namespace))
        left[kind] = [i["metadata"]["name"] for i in items if i["metadata"]["name"].startswith(job)]
    return left


NOTHING: dict[str, list[str]] = {kind: [] for kind in JOB_KINDS}


def summary(run: Run) -> str:
    """The `training ...: job ...` line of the summary (exactly one)."""
    (line,) = [line for line in run.log if line.startswith("[ci-runner] training ")]
    return line


def quota_run(
    site: Site, namespace: str, resources: dict[str, object], defaults: dict[str, str] | None
) -> tuple[Run, str]:
    """`ci-runner train` of project ``group/<namespace>`` with train.yaml's ``resources`` in a
    new namespace of that name with the quota (:func:`quota_namespace`); the run, its MPIJob."""
    quota_namespace(site, namespace, defaults)
    config = train_yaml(namespace=namespace)
    config["resources"] = resources
    run = train(site, namespace, config, namespace=namespace)
    return run, job_name(run.log)


def assert_nothing_left(site: Site, namespace: str, job: str) -> None:
    """Within a minute (the garbage collector's time), nothing of ``job`` in ``namespace``."""
    deadline = time.monotonic() + 60
    while left_of(site, namespace, job) != NOTHING:
        assert time.monotonic() < deadline, left_of(site, namespace, job)
        time.sleep(0.5)


def test_a_namespace_with_a_cpu_and_memory_quota_trains_the_example(site: Site) -> None:
    # Workers have no default (the user says what training needs); setup and launcher do.
    run, job = quota_run(site, "quota", {"cpu": "500m", "memory": "2Gi"}, None)
    assert_trained(run, "quota")
    assert re.fullmatch(rf"\[ci-runner\] training succeeded in \d+s: job {job}", summary(run))
    assert_nothing_left(site, "quota", job)


def test_resources_none_trains_on_a_limit_ranges_defaults_in_a_quota_namespace(
    site: Site,
) -> None:
    defaults = {"cpu": "500m", "memory": "2Gi"}
    run, job = quota_run(site, "limits", {"setup": "none", "launcher": "none"}, defaults)
    assert_trained(run, "limits")
    assert re.fullmatch(rf"\[ci-runner\] training succeeded in \d+s: job {job}", summary(run))


def test_resources_none_in_a_quota_namespace_without_defaults_is_refused_in_one_line(
    site: Site,
) -> None:
    run, job = quota_run(site, "nodefaults", {"setup": "none", "launcher": "none"}, None)
    message = failure_line(run)
    containers = "fetch-code,install-requirements,worker"
    missing = "; ".join(
        f"{field} for: {containers}"
        for field in ("limits.cpu", "limits.memory", "requests.cpu", "requests.memory")
    )
    assert re.fullmatch(
        re.escape("MPI Operator cannot create the job's pods: worker pod created failed: ")
        + rf'pods "{job}-worker-[01]" is forbidden: '
        + re.escape(
            f"failed quota: compute: must specify {missing}; fix: the namespace's ResourceQuota "
            "counts cpu and memory, so every container must declare them: set resources.cpu, "
            "resources.memory and resources.setup in train.yaml"
        ),
        message,
    ), message
    assert_failed(run, message)
    assert_nothing_left(site, "nodefaults", job)


def training(site: Site, name: str) -> tuple[Pipeline, subprocess.Popen[str], list[str], str]:
    """A pipeline of the example set to run for ever, started and read up to its first epoch:
    the pipeline, ``ci-runner train``, the lines so far and the MPIJob's name."""
    config = train_yaml()
    config["env"] = {**config["env"], "EPOCHS": "100000"}  # type: ignore[dict-item]
    job = pipeline(site, name, config)
    train = job.start("train")
    seen = read_until(train, "Training. Epoch 1,")
    return job, train, seen, job_name(seen)


def disrupted_line(job: Pipeline, train: subprocess.Popen[str], seen: list[str]) -> str:
    """The failure line of a run whose worker the cluster stopped, checked in the MR comment."""
    run = finish(job, train, seen)
    message = failure_line(run)
    assert_failed(run, message)
    return message


def test_an_evicted_worker_is_named_with_its_disruption_target(site: Site) -> None:
    job, train, seen, name = training(site, "evict")
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": f"{name}-worker-1", "namespace": NAMESPACE},
    }
    site.cluster.api.create(
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}-worker-1/eviction", eviction
    )
    assert disrupted_line(job, train, seen) == (
        f"worker {name}-worker-1 was stopped by the cluster (EvictionByEvictionAPI: Eviction "
        "API: evicting); the launcher then failed"
    )


@pytest.fixture
def high_priority(site: Site) -> Iterator[str]:
    """A PriorityClass above the default (0) that may preempt, deleted after the test with the
    pods that use it."""
    name = "ci-runner-test-urgent"
    api = site.cluster.api
    priority_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": 1000000,
    }
    api.create("/apis/scheduling.k8s.io/v1/priorityclasses", priority_class)
    yield name
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    api.delete(f"{pods}/urgent", {"gracePeriodSeconds": 0})
    api.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def test_a_worker_the_scheduler_preempts_for_a_higher_priority_pod_is_named(
    site: Site, high_priority: str
) -> None:
    job, train, seen, name = training(site, "preempt")
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"

    def node_of(pod: str) -> str:
        found = site.cluster.api.get(f"{pods}/{pod}")
        assert found is not None, pod
        return str(found["spec"]["nodeName"])

    launcher = next(
        p["metadata"]["name"]
        for p in site.cluster.api.list(
            pods, {"labelSelector": "training.kubeflow.org/job-role=launcher"}
        )[0]
        if p["metadata"]["name"].startswith(name)
    )
    # The worker alone on its node: a pod that needs the whole node's CPU preempts it and
    # nothing else.
    worker = next(
        w for w in (f"{name}-worker-0", f"{name}-worker-1") if node_of(w) != node_of(launcher)
    )
    urgent = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "urgent", "namespace": NAMESPACE},
        "spec": {
            "priorityClassName": high_priority,
            "nodeSelector": {"kubernetes.io/hostname": node_of(worker)},
            "containers": [busybox("main", "sleep", "600", resources={"requests": {"cpu": "2"}})],
        },
    }
    site.cluster.api.create(pods, urgent)
    assert disrupted_line(job, train, seen) == (
        f"worker {worker} was stopped by the cluster (PreemptionByScheduler: default-scheduler: "
        "preempting to accommodate a higher priority pod); the launcher then failed"
    )


# A build backend of the commit's own whose wheel build never ends: install-requirements runs as
# long as the test wants, with no index (PIP_NO_INDEX) and nothing to install in its isolation.
SLOW_PACKAGE = {
    "requirements.txt": b"-r examples/simple_ml/requirements.txt\n./libs/slowpkg\n",
    "libs/slowpkg/pyproject.toml": (
        b'[build-system]\nrequires = []\nbuild-backend = "slow_backend"\nbackend-path = ["."]\n'
        b'\n[project]\nname = "slowpkg"\nversion = "1.0"\n'
    ),
    "libs/slowpkg/slow_backend.py": (
        b"import time\n\n\ndef get_requires_for_build_wheel(config_settings=None):\n"
        b"    return []\n\n\ndef build_wheel(wheel_directory, config_settings=None, "
        b"metadata_directory=None):\n    time.sleep(3600)\n"
    ),
}


def killed_while_installing(
    site: Site, namespace: str, config: dict[str, object]
) -> tuple[str, JSON, str]:
    """`ci-runner train` of ``config`` (slowpkg to install, so setup lasts) in a new
    ``namespace``, SIGKILLed once a pod installs requirements (no cancel, no after_script); its
    job's name, that pod, and its kind's word (MPIJob or Job)."""
    config["timeout"] = "10s"
    config["requirements"] = "requirements.txt"
    accounts.create_namespace(site.cluster.api, namespace)
    job = pipeline(site, namespace, config, SLOW_PACKAGE, namespace=namespace)
    # The 10 minutes the pods get beyond the job's own timeouts (render.pod_deadlines; its
    # value is tests/test_render.py's) shrink to 20 s here, so that the test waits a minute.
    job.margin = MARGIN
    train = job.start("train")
    assert train.stdout is not None
    seen = []
    for line in train.stdout:
        seen.append(line.rstrip("\n"))
        if SUBMITTED.match(line):
            break
    else:
        raise AssertionError("\n".join(seen))
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def installing() -> list[JSON]:
        return [
            pod
            for pod in site.cluster.api.list(pods)[0]
            if any(
                s["name"] == "install-requirements" and "running" in s["state"]
                for s in pod["status"].get("initContainerStatuses") or []
            )
        ]

    deadline = time.monotonic() + 120
    while not installing():
        assert time.monotonic() < deadline, site.cluster.api.list(pods)[0]
        time.sleep(0.2)
    train.kill()
    train.wait(10)
    return job_name(seen), installing()[0], job_kind(seen)


def ended_by_their_deadline(site: Site, namespace: str, started: str, bound: int) -> None:
    """Every pod of ``namespace`` ends (or goes) by ``bound`` seconds after ``started`` (its
    grace and a margin more), and not before."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    begun = datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    grace = 30  # the pods' terminationGracePeriodSeconds (the default)
    until = begun + timedelta(seconds=bound + grace + 15)
    while any(
        p["status"].get("phase") not in ("Succeeded", "Failed")
        for p in site.cluster.api.list(pods)[0]
    ):
        assert datetime.now(timezone.utc) < until, site.cluster.api.list(pods)[0]
        time.sleep(1)
    assert datetime.now(timezone.utc) >= begun + timedelta(seconds=bound)


def reaped_by_the_next_run(
    site: Site, namespace: str, config: dict[str, object], name: str, stamp: str
) -> None:
    """Once ``stamp`` (the job's ci-runner/delete-after) has passed, the next CI job in
    ``namespace`` (a cancel, as after_script runs it) deletes job ``name`` and all it owns."""
    after = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    time.sleep(max(0.0, (after - datetime.now(timezone.utc)).total_seconds()) + 1)
    reaper = pipeline(site, f"reaper-{namespace}", config, namespace=namespace)
    cancel = reaper.start("cancel", CI_JOB_STATUS="canceled")
    output, _ = cancel.communicate(timeout=120)
    assert cancel.returncode == 0, output
    kind = "Job" if config.get("distributed") == "torchrun" else "MPIJob"
    assert (
        f"[ci-runner] deleted {kind} {name}: its time (ci-runner/delete-after) had passed; an "
        "earlier run kept it, or was stopped before it could delete it"
    ) in output.splitlines(), output
    assert_nothing_left(site, namespace, name)


def test_a_ci_job_killed_during_setup_leaves_no_running_pod_and_the_next_run_reaps_it(
    site: Site,
) -> None:
    # setup_timeout outlasts a slow machine's fetch-code (10-14 s seen), or ci-runner would end
    # the job itself before the worker installs and there would be nothing to kill it during.
    config = train_yaml(namespace="killed", setup_timeout="30s", unschedulable_timeout="5s")
    name, worker, _ = killed_while_installing(site, "killed", config)
    bound = worker["spec"]["activeDeadlineSeconds"]
    # render.pod_deadlines: setup_timeout + unschedulable_timeout + timeout + the margin
    assert bound == 30 + 5 + 10 + MARGIN
    ended_by_their_deadline(site, "killed", worker["status"]["startTime"], bound)
    ended = site.cluster.api.get(f"/api/v1/namespaces/killed/pods/{worker['metadata']['name']}")
    assert ended is not None
    assert (ended["status"]["phase"], ended["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert left_of(site, "killed", name)["mpijobs"] == [name]
    mpijob = site.cluster.api.get(f"/apis/kubeflow.org/v2beta1/namespaces/killed/mpijobs/{name}")
    assert mpijob is not None
    stamp = mpijob["metadata"]["annotations"]["ci-runner/delete-after"]
    reaped_by_the_next_run(site, "killed", train_yaml(namespace="killed"), name, stamp)


def test_a_ci_job_killed_while_a_torchrun_node_sets_up_leaves_no_running_pod_then_is_reaped(
    site: Site,
) -> None:
    # The Indexed Job's own deadline (setup + wait for a node + timeout + margin, counted from its
    # start) ends its pods when no ci-runner is left; the next run deletes the Job.
    config = ddp_train_yaml(namespace="killed-ddp", setup_timeout="30s", unschedulable_timeout="5s")
    name, node, kind = killed_while_installing(site, "killed-ddp", config)
    assert kind == "Job"
    path = f"/apis/batch/v1/namespaces/killed-ddp/jobs/{name}"
    created = site.cluster.api.get(path)
    assert created is not None
    bound = created["spec"]["activeDeadlineSeconds"]
    assert bound == 30 + 5 + 10 + MARGIN  # torchrun_job.job_deadline
    assert node["spec"]["activeDeadlineSeconds"] == bound
    ended_by_their_deadline(site, "killed-ddp", created["status"]["startTime"], bound)

    def failed() -> tuple[JSON, list[str]]:
        """The Job, and its Failed condition's reason (the Job controller writes FailureTarget
        first, Failed once its pods are gone)."""
        job = site.cluster.api.get(path)
        assert job is not None
        conditions = job["status"].get("conditions") or []
        return job, [c["reason"] for c in conditions if c["type"] == "Failed"]

    deadline = time.monotonic() + 60
    while not failed()[1]:
        assert time.monotonic() < deadline, failed()[0]["status"]
        time.sleep(0.5)
    ended, reasons = failed()
    assert reasons == ["DeadlineExceeded"], ended["status"]
    assert left_of(site, "killed-ddp", name)["jobs"] == [name]
    stamp = ended["metadata"]["annotations"]["ci-runner/delete-after"]
    reaped_by_the_next_run(site, "killed-ddp", ddp_train_yaml(namespace="killed-ddp"), name, stamp)
