"""The ``ci-runner`` subcommands, one module each; ``common`` holds what they share."""
