"""``python -m ci_runner``: the same as the ``ci-runner`` command."""

from ci_runner.cli import main_entry

if __name__ == "__main__":
    main_entry()
