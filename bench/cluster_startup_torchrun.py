"""6. (torchrun) Submit -> first training step of the DDP example, in bench 6's run and rounds.

After each round's Horovod runs (:mod:`bench.cluster_startup`), on the same cluster, commit and
pip cache claim, two more:

* ``ci-runner train`` of ``examples/simple_ml/main_with_ddp.py`` with ``distributed: torchrun``
  (an Indexed Job of 2 pods, one rank each, gloo), warm as the Horovod warm run is: the round's
  claim, filled by its cold run. The requirements, the image and the pip settings are the same,
  so its install-requirements finds the virtualenv that run kept (the same key) and runs no pip.
* the seed's way for torchrun, written by hand as a seed user would write it (there is no
  operator to lean on): an Indexed Job (``completionMode: Indexed``) and a headless Service of
  its name, as Kubernetes' docs show for pod-to-pod communication. Each pod clones the code and
  runs ``pip install -r requirements.txt`` at every start, node 0 then sleeps a minute as the
  seed's launcher does (its way of waiting for the other nodes' install), and each runs
  ``python -m torch.distributed.run`` (torchrun) with ``--node-rank $JOB_COMPLETION_INDEX`` and
  node 0's name ``<job>-0.<job>``.

ci-runner's clock runs from its ``submitted`` line (the Job created) to the first
``Training. Epoch N, MSE loss`` line of its output, as the Horovod runs'; the seed's from
creating its Job (the Service is made first, off the clock) to the first such line of node 0's
log. The ratio that decides is the median of the per-round ratios.

Target: the warm run at least 12x faster than the seed's way, per round. Issue 44 asks for
bench 6 "also for torchrun"; the Horovod rows' target is 8x (issue 24), and issue 48 raises the
warm target to 12x for both ways to distribute, which is the one these rows hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bench.cluster_startup import JSON, NAME, SEED_SLEEP, Site, per_round, ratio
from bench.common import NOT_MET, Row, check, say, spread
from bench.fixture import EXAMPLE

WARM = "torchrun warm"
SEED = "torchrun seed"
# train.yaml's fields that make the Horovod runs' train.yaml torchrun's (train-ddp.yaml's).
TORCHRUN = {"distributed": "torchrun", "command": f"python {EXAMPLE}/main_with_ddp.py"}
MASTER_PORT = 29500  # torchrun's default
NODES = 2
# The warm run (the requirements' virtualenv kept) at least this much faster than the seed's way
# (issue 48's target for warm runs).
MIN_SPEEDUP = 12.0


def seed_indexed_job(
    name: str, namespace: str, repo_url: str, env: Mapping[str, str]
) -> tuple[JSON, JSON]:
    """The seed's way as an Indexed Job ``name`` and the headless Service its pods find node 0
    through: what a user who clones, installs and sleeps at every start writes for torchrun."""
    node = (
        f"git clone -q {repo_url} simple_ml && cd simple_ml && pip install -r requirements.txt"
        f' && if [ "$JOB_COMPLETION_INDEX" = 0 ]; then sleep {SEED_SLEEP}; fi'
        f" && cd {EXAMPLE} && exec python -m torch.distributed.run --nnodes {NODES}"
        f' --nproc-per-node 1 --node-rank "$JOB_COMPLETION_INDEX" --master-addr {name}-0.{name}'
        f" --master-port {MASTER_PORT} main_with_ddp.py"
    )
    container = {
        "name": "ddp",
        "image": "horovod/horovod:0.28.1",
        "command": ["/bin/sh", "-c"],
        "args": [node],
        "env": [{"name": key, "value": value} for key, value in env.items()],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "completionMode": "Indexed",
            "completions": NODES,
            "parallelism": NODES,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "subdomain": name,
                    "restartPolicy": "Never",
                    "containers": [container],
                }
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": name}},
    }
    return job, service


def seed(site: Site) -> float:
    """Seconds from creating the seed's Indexed Job to the first loss line of node 0's log."""
    name = f"seed-ddp-{site.runs}"
    job, service = seed_indexed_job(name, site.namespace, site.repo_url, site.seed_env(name))
    services = f"/api/v1/namespaces/{site.namespace}/services"
    site.cluster.api.create(services, service)
    selector = f"batch.kubernetes.io/job-name={name},batch.kubernetes.io/job-completion-index=0"
    jobs = f"/apis/batch/v1/namespaces/{site.namespace}/jobs"
    return site.until_first_step(jobs, job, selector, (f"{services}/{name}",))


class Rounds:
    """The torchrun rows' runs, one pair a round, their seconds in bench 6's ``times``."""

    def __init__(self, times: dict[str, list[float]]) -> None:
        self.times = times
        times.update({WARM: [], SEED: []})
        self.reused: list[bool | None] = []  # the round's virtualenv reused; None: none found
        self.horovod_warm: list[float] = []
        self.failures: list[str] = []

    def one_round(self, site: Site, kubeconfig: Path, claim: str) -> None:
        """ci-runner's torchrun run on ``claim`` (which the round's cold run filled), then the
        seed's way."""
        say("torchrun: ci-runner warm, the seed's way")
        site.commit(claim, TORCHRUN)
        before = _virtualenvs(claim)
        try:
            warm = site.ci_runner(kubeconfig, None)[0]
            reused = _virtualenvs(claim) == before if before else None
            seeds = seed(site)
        except RuntimeError as error:  # the Horovod rows of the run are kept
            say(f"torchrun failed: {error}")
            self.failures.append(str(error).splitlines()[0])
            site.wait_no_pods()
            return
        self.times[WARM].append(warm)
        self.reused.append(reused)
        self.times[SEED].append(seeds)
        # The Horovod warm run of the same round, for the ratio of the rounds where both ran.
        self.horovod_warm.append(self.times["warm"][-1])

    def rows(self) -> list[Row]:
        times = self.times
        failed = [
            Row(NAME, "torchrun: a round failed", failure, "", NOT_MET) for failure in self.failures
        ]
        if not times[WARM]:
            return failed
        return [
            *failed,
            Row(NAME, "torchrun: ci-runner train, warm (same claim)", spread(times[WARM])),
            Row(NAME, "  torchrun warm: the Horovod cold run's virtualenv", self._reused()),
            Row(
                NAME,
                f"torchrun: seed's way (Indexed Job, pip at every start, sleep {SEED_SLEEP})",
                spread(times[SEED]),
            ),
            Row(
                NAME,
                "torchrun: seed's way / warm",
                ratio(times, SEED, WARM),
                f">= {MIN_SPEEDUP:.0f}x",
                check(per_round(times, SEED, WARM) >= MIN_SPEEDUP),
            ),
            Row(
                NAME,
                "torchrun warm / Horovod warm",
                ratio({WARM: times[WARM], "warm": self.horovod_warm}, WARM, "warm"),
            ),
        ]

    def _reused(self) -> str:
        if None in self.reused:
            return "not known: the claim held no virtualenv before the run"
        if all(self.reused):
            return f"reused in every round (n={len(self.reused)}): no new one in the claim"
        return f"NOT reused in {self.reused.count(False)} of {len(self.reused)} rounds (not warm)"


def _virtualenvs(claim: str) -> set[str]:
    """The virtualenvs install-requirements kept in ``claim`` (``<subPath>/venvs/<key>``)."""
    from testing.emulated_cluster.harness import claim_directory

    root = claim_directory(claim)
    return {str(path.relative_to(root)) for path in root.glob("*/venvs/*")}
