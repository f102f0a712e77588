"""The run plan: everything a run derives from train.yaml, the CI context and the environment,
computed once and consumed by rendering, both backends, cancel and reporting."""
