"""The console: ci-runner's lines on stderr, the training log on stdout, both masked and flushed."""

from __future__ import annotations

import io

from ci_runner.console import Console, status_line
from ci_runner.masking import SecretMasker
from ci_runner.settings import read_settings


class Stream(io.StringIO):
    """A stream that remembers how much of it had been written at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


def test_status_and_warning_are_prefixed_lines_on_stderr() -> None:
    out, err = Stream(), Stream()
    console = Console(out, err)

    console.status("submitted MPIJob j1 in namespace ml")
    console.warning("the comment was not posted: boom")

    assert err.getvalue() == (
        "[ci-runner] submitted MPIJob j1 in namespace ml\n"
        "[ci-runner] warning: the comment was not posted: boom\n"
    )
    assert err.flushed == [
        "[ci-runner] submitted MPIJob j1 in namespace ml\n",
        err.getvalue(),
    ]
    assert out.getvalue() == ""


def test_echo_passes_the_log_through_as_it_is_to_stdout() -> None:
    out, err = Stream(), Stream()
    console = Console(out, err, SecretMasker(["hunter2-secret"]))

    console.echo("[0]<stdout>:loss 1 ")
    console.echo("step 0\n")

    # The log sink masked the log already; the console does not touch it.
    assert out.flushed == ["[0]<stdout>:loss 1 ", "[0]<stdout>:loss 1 step 0\n"]
    assert err.getvalue() == ""


def test_answer_is_a_prefixed_line_on_stdout() -> None:
    out, err = Stream(), Stream()
    Console(out, err).answer("train.yaml at 0123abcd is valid")
    assert (out.getvalue(), err.getvalue()) == ("[ci-runner] train.yaml at 0123abcd is valid\n", "")


def test_relay_shows_another_programs_output_on_stderr_unchanged_but_masked() -> None:
    out, err = Stream(), Stream()
    console = Console(out, err, SecretMasker(["hunter2-secret"]))
    console.relay("Collecting torch (from -r r.txt (line 1)) hunter2-secret")
    assert err.getvalue() == "Collecting torch (from -r r.txt (line 1)) [MASKED]"


def test_the_environments_credentials_are_masked_and_train_yaml_secrets_once_known() -> None:
    out, err = Stream(), Stream()
    env = {"CI_JOB_TOKEN": "glcbt-job-token", "WANDB_API_KEY": "wandb-value"}
    console = Console(out, err, read_settings(env).masker())

    console.status("token glcbt-job-token, key wandb-value")
    console.add_secrets([env["WANDB_API_KEY"]])
    console.warning("token glcbt-job-token, key wandb-value")
    console.answer("key wandb-value")

    assert err.getvalue() == (
        "[ci-runner] token [MASKED], key wandb-value\n"
        "[ci-runner] warning: token [MASKED], key [MASKED]\n"
    )
    assert out.getvalue() == "[ci-runner] key [MASKED]\n"
    assert console.masker.values == ("glcbt-job-token", "wandb-value")


def test_status_line() -> None:
    assert status_line("every rank stopped") == "[ci-runner] every rank stopped\n"
