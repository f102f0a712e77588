"""Kueue's names that ci-runner writes on a job and reads back: the labels that put a job in a
LocalQueue and give it a WorkloadPriorityClass, the one Kueue puts on the job's Workload, and
the Workload's condition types and reasons (sigs.k8s.io/kueue v0.17.0:
pkg/controller/constants/constants.go, apis/kueue/v1beta2/workload_types.go)."""

from __future__ import annotations

from typing import Final

QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
# On the Workload Kueue makes for a job: the job's uid.
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
