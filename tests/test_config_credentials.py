"""Credentials written in train.yaml, and commands mpirun would read as its own options: refused
at validation, one line each, never echoing the value (issue 34).

The tokens here are made of pieces, so that no secret scanner takes this file for a leak.
"""

from __future__ import annotations

import pytest

from ci_runner.config.kinds import CREDENTIALS, credential_in
from ci_runner.config.schema import load_config
from testing.config_cases import BASE, BASE_WITHOUT_COMMAND, problems

RANDOM = "Ab3dEfGh1jKlMn0pQrStUv"  # mixed case and digits, as issued keys are
GITLAB = "glpat-" + RANDOM
GITHUB = "ghp_" + RANDOM + "Wx9zAb3dEfGh1jKl"  # 36 after the prefix
GITHUB_FINE = "github_pat_" + "11AB" + "C" * 18 + "_" + RANDOM * 3
HUGGING_FACE = "hf_" + "AbcdEfghIjklMnopQrstUvwxYzabCdefGh"  # 34 letters
SLACK = "xoxb-" + "123456789012-" + "1234567890123-" + RANDOM
OPENAI = "sk-proj-" + RANDOM * 2
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
PEM = "-----BEGIN " + "OPENSSH PRIVATE KEY-----"
FIX = (
    "fix: remove it, revoke it (the repository's history keeps it) and pass it as a masked "
    "CI/CD variable: secrets: [{name}]"
)


def refused(name: str, what: str, line: int = 6) -> str:
    return f"train.yaml:{line}: env.{name}: holds {what} in clear text; " + FIX.format(name=name)


@pytest.mark.parametrize(
    ("name", "value", "what"),
    [
        ("PIP_INDEX_URL", "https://user:pw@pypi.example.com/simple", "a URL with a password"),
        ("DATABASE_URL", "postgres://ml:" + RANDOM + "@db:5432/runs", "a URL with a password"),
        ("GITLAB_TOKEN", GITLAB, "a GitLab token"),
        ("CI_TOKEN", "glcbt-" + RANDOM, "a GitLab token"),
        ("OAUTH", "gloas-" + RANDOM * 3, "a GitLab token"),
        ("GH_TOKEN", GITHUB, "a GitHub token"),
        ("GH_FINE", GITHUB_FINE, "a GitHub token"),
        ("HF_TOKEN", HUGGING_FACE, "a Hugging Face token"),
        ("SLACK_TOKEN", SLACK, "a Slack token"),
        ("OPENAI_API_KEY", OPENAI, "an API key (sk-)"),
        ("AWS_ACCESS_KEY_ID", AWS_KEY_ID, "an AWS access key id"),
        ("AWS_SECRET_ACCESS_KEY", AWS_SECRET, "an AWS secret access key"),
        ("DEPLOY_KEY", PEM + "\nb3BlbnNzaC1rZXktdjE=\n", "a private key"),
    ],
)
def test_a_credential_in_env_is_refused_without_echoing_it(
    name: str, value: str, what: str
) -> None:
    quoted = value.replace("\\", "\\\\").replace("\n", "\\n")
    lines = problems(f'{BASE}env:\n  EPOCHS: 3\n  {name}: "{quoted}"\n')
    if what == "a URL with a password":
        what = "a URL with a password (user:password@)"
    assert lines == [refused(name, what)]
    assert all(value.strip() not in line for line in lines)


def test_an_aws_secret_is_refused_next_to_a_key_id_whatever_its_name() -> None:
    text = f"{BASE}env:\n  KEY: {AWS_KEY_ID}\n  S3_PASSWORD: {AWS_SECRET}\n"
    assert problems(text) == [
        refused("KEY", "an AWS access key id", 5),
        refused("S3_PASSWORD", "an AWS secret access key", 6),
    ]


@pytest.mark.parametrize(
    "value",
    [
        "https://pypi.example.com/simple",
        "https://user@pypi.example.com/simple",  # a user name alone is no secret
        "https://user:$(PIP_TOKEN)@pypi.example.com/simple",  # Kubernetes expands it
        "https://user:${PIP_TOKEN}@pypi.example.com/simple",
        "http://proxy.example.com:3128/",
        "https://host:8080/path@v2",
        "git@gitlab.example.com:group/project.git",
        "sk-learn-experiment-with-many-long-words-in-its-name",
        "0123456789abcdef0123456789abcdef01234567",  # a commit SHA
        AWS_SECRET,  # 40 base64 characters, but no key id beside it: a checksum, a path...
        "hf_transfer",
        "glpat-short",
        "BEGIN PRIVATE KEY",
        "s3://models/AKIA/runs/",
    ],
)
def test_ordinary_values_are_not_taken_for_credentials(value: str) -> None:
    config = load_config(f'{BASE}env:\n  VALUE: "{value}"\n')
    assert config.env == (("VALUE", value),)


def test_every_rule_finds_what_its_comment_says() -> None:
    samples = [
        "https://u:p@h/",
        GITLAB,
        GITHUB,
        GITHUB_FINE,
        HUGGING_FACE,
        SLACK,
        OPENAI,
        "sk_live_" + RANDOM + "xy",
        AWS_KEY_ID,
        PEM,
    ]
    assert len(samples) == len(CREDENTIALS)
    for credential, sample in zip(CREDENTIALS, samples, strict=True):
        assert credential.found_in(sample), credential.name
    assert [credential_in(sample) for sample in samples] == [c.name for c in CREDENTIALS]


def test_a_credential_in_the_command_is_refused() -> None:
    text = f"{BASE_WITHOUT_COMMAND}command: python train.py --hf-token {HUGGING_FACE}\n"
    assert problems(text) == [
        "train.yaml:3: command: holds a Hugging Face token in clear text; fix: remove it, revoke "
        "it (the repository's history keeps it) and pass it as a masked CI/CD variable listed "
        "under secrets:, which the program reads from its environment"
    ]
    listed = f"{BASE_WITHOUT_COMMAND}command:\n  - python\n  - --url=https://u:{RANDOM}@h/x\n"
    assert problems(listed)[0].startswith(
        "train.yaml:4: command: holds a URL with a password (user:password@) in clear text; "
    )


@pytest.mark.parametrize(
    ("command", "line", "first"),
    [
        ("--mca plm_rsh_agent 'sh -c id' python train.py", 3, "--mca"),
        ("[--mca, plm_rsh_agent, 'sh -c id', python]", 3, "--mca"),
        ("\n  - -x\n  - LD_PRELOAD=/tmp/x.so\n  - python", 4, "-x"),
        ("'-np 64 python train.py'", 3, "-np"),
    ],
)
def test_a_command_starting_with_an_option_is_refused(command: str, line: int, first: str) -> None:
    assert problems(f"{BASE_WITHOUT_COMMAND}command: {command}\n") == [
        f"train.yaml:{line}: command: starts with the option '{first}', which mpirun and "
        "horovodrun would take as their own; fix: start it with the program every rank runs, "
        "e.g. command: python train.py --epochs 10"
    ]


def test_options_after_the_program_are_the_programs() -> None:
    config = load_config(f"{BASE_WITHOUT_COMMAND}command: python -u train.py --mca x\n")
    assert config.command == ("python", "-u", "train.py", "--mca", "x")
