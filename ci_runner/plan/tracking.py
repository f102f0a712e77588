"""What every rank needs to join the job's MLflow run: MLflow's own variables.

Only when train.yaml's ``tracking.ranks_log`` asks for it: by default the ranks get no MLflow
variable and no token (ci-runner logs the run from the log). The run is created before training
starts (:mod:`ci_runner.tracking`), then ``run_plan.with_tracking`` gives the plan the run's id:
``MLFLOW_TRACKING_URI``, ``MLFLOW_RUN_ID`` and ``MLFLOW_EXPERIMENT_ID`` go to every rank as plain
variables, the ranks' own token (``CI_RUNNER_MLFLOW_TOKEN``) or MLflow's password through the
job's Secret (never inline in the manifest), so ``mlflow.log_*`` in rank 0 adds to that run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ci_runner import variables

URI_VARIABLE: Final = variables.MLFLOW_TRACKING_URI
RUN_ID_VARIABLE: Final = variables.MLFLOW_RUN_ID
EXPERIMENT_ID_VARIABLE: Final = variables.MLFLOW_EXPERIMENT_ID
INSECURE_TLS_VARIABLE: Final = variables.MLFLOW_TRACKING_INSECURE_TLS
TOKEN_VARIABLE: Final = variables.MLFLOW_TRACKING_TOKEN
USERNAME_VARIABLE: Final = variables.MLFLOW_TRACKING_USERNAME
PASSWORD_VARIABLE: Final = variables.MLFLOW_TRACKING_PASSWORD
# The token made for the ranks (train.yaml's tracking.ranks_log); they get it as TOKEN_VARIABLE.
RANK_TOKEN_VARIABLE: Final = variables.CI_RUNNER_MLFLOW_TOKEN
# MLflow's variables in ci-runner's own environment are ci-runner's: ranks on this machine do not
# inherit them, as pods do not (they get those with_tracking sets, and train.yaml's env and
# secrets).
NOT_INHERITED_PREFIX: Final = variables.MLFLOW_PREFIX
# The variables ci-runner sets for the ranks when the run is tracked: train.yaml's env and
# secrets give way to them.
SET_FOR_RANKS: Final = frozenset(
    {
        URI_VARIABLE,
        RUN_ID_VARIABLE,
        EXPERIMENT_ID_VARIABLE,
        INSECURE_TLS_VARIABLE,
        TOKEN_VARIABLE,
        USERNAME_VARIABLE,
        PASSWORD_VARIABLE,
    }
)


@dataclass(frozen=True)
class RankTracking:
    """The run every rank joins: plain variables, and the credentials (Secret keys)."""

    uri: str
    run_id: str
    experiment_id: str
    insecure_tls: bool = False
    username: str | None = None
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)  # name -> value

    def variables(self) -> tuple[tuple[str, str], ...]:
        """The plain variables, in the order the manifest lists them."""
        env = [
            (URI_VARIABLE, self.uri),
            (RUN_ID_VARIABLE, self.run_id),
            (EXPERIMENT_ID_VARIABLE, self.experiment_id),
        ]
        if self.username:
            env.append((USERNAME_VARIABLE, self.username))
        if self.insecure_tls:
            env.append((INSECURE_TLS_VARIABLE, "true"))
        return tuple(env)


def give_way(names: Iterable[str], tracking: RankTracking) -> tuple[str, ...]:
    """The Secret's keys the ranks get when they join ``tracking``'s run: ``names`` without
    those ci-runner sets for them (:data:`SET_FOR_RANKS`: a train.yaml secret of that name gives
    way), then the run's credentials."""
    return (*(n for n in names if n not in SET_FOR_RANKS), *tracking.credentials)
