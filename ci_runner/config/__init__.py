"""train.yaml → :class:`~ci_runner.config.types.TrainConfig`: the file read at a commit, parsed with
line numbers, validated against the schema, every problem named with its path and fix."""
