"""Secrets masked as they are and as base64 and URL encoding write them."""

from __future__ import annotations

import base64
from collections.abc import Callable
from urllib.parse import quote

import pytest

from ci_runner.masking import MASK, SecretMasker, encoded_forms

SECRET = "s3cr3t-t0ken!"
# Its base64 holds '+' or '/' at every offset: the URL-safe alphabet writes it otherwise.
SLASHED = "k3y?>~=!"


def test_the_forms_of_a_secret() -> None:
    assert encoded_forms(SECRET) == {
        "czNjcjN0LXQwa2VuI",  # base64 at offset 0 (whole: czNjcjN0LXQwa2VuIQ==)
        "MzY3IzdC10MGtlbi",  # at offset 1
        "zM2NyM3QtdDBrZW4h",  # at offset 2
        "s3cr3t-t0ken%21",  # URL-encoded, either way
    }
    assert encoded_forms(SLASHED) == {
        "azN5Pz5+PS",
        "azN5Pz5-PS",
        "rM3k/Pn49I",
        "rM3k_Pn49I",
        "szeT8+fj0h",
        "szeT8-fj0h",
        "k3y%3F%3E~%3D%21",
    }
    assert encoded_forms("pass word/+") == {
        "cGFzcyB3b3JkLy",
        "wYXNzIHdvcmQvK",
        "Bhc3Mgd29yZC8r",
        "pass%20word%2F%2B",  # quote
        "pass+word%2F%2B",  # quote_plus
    }


def test_only_forms_that_differ_from_the_value() -> None:
    assert encoded_forms("glcbt-64-token") == {
        "Z2xjYnQtNjQtdG9rZW",
        "nbGNidC02NC10b2tlb",
        "dsY2J0LTY0LXRva2Vu",
    }


def test_no_form_is_shorter_than_a_secret_may_be() -> None:
    assert encoded_forms("abcd") == {"YWJjZ", "FiY2", "hYmNk"}  # the shortest: 4 characters
    assert encoded_forms("abc") == {"YWJj"}  # not "FiY" nor "hYm" (offsets 1 and 2)


@pytest.mark.parametrize(
    ("plain", "masked"),
    [
        (f"abc{SECRET} and more", f"YWJj{MASK}SBhbmQgbW9yZQ=="),
        (f"abcd{SECRET} and more", f"YWJjZH{MASK}EgYW5kIG1vcmU="),
        (f"abcde{SECRET} and more", f"YWJjZGV{MASK}IGFuZCBtb3Jl"),
        (SECRET, f"{MASK}Q=="),
    ],
    ids=["offset 0", "offset 1", "offset 2", "alone"],
)
def test_base64_of_a_secret_at_each_offset_is_masked(plain: str, masked: str) -> None:
    text = base64.b64encode(plain.encode()).decode()
    assert SecretMasker([SECRET]).mask(text) == masked


@pytest.mark.parametrize(
    ("plain", "masked"),
    [
        (f"abc{SLASHED} and more", f"YWJj{MASK}EgYW5kIG1vcmU="),
        (f"abcd{SLASHED} and more", f"YWJjZG{MASK}IGFuZCBtb3Jl"),
        (f"abcde{SLASHED} and more", f"YWJjZGV{MASK}SBhbmQgbW9yZQ=="),
    ],
    ids=["offset 0", "offset 1", "offset 2"],
)
@pytest.mark.parametrize(
    "encode", [base64.b64encode, base64.urlsafe_b64encode], ids=["standard", "URL-safe"]
)
def test_both_base64_alphabets_are_masked(
    plain: str, masked: str, encode: Callable[[bytes], bytes]
) -> None:
    assert SecretMasker([SLASHED]).mask(encode(plain.encode()).decode()) == masked


def test_url_encoded_secrets_are_masked() -> None:
    masker = SecretMasker([SECRET, "pass word/+"])

    assert masker.mask("https://h/?t=s3cr3t-t0ken%21&x=1") == f"https://h/?t={MASK}&x=1"
    assert masker.mask("a=pass%20word%2F%2B b=pass+word%2F%2B c=pass word/+") == (
        f"a={MASK} b={MASK} c={MASK}"
    )


def test_a_secret_holding_another_is_masked_whole_in_every_form() -> None:
    token = "glcbt-64-token"
    url = f"https://gitlab-ci-token:{token}@gitlab.example.com/g/p.git"
    masker = SecretMasker([token, url])

    assert masker.mask(f"clone {quote(url, safe='')}") == f"clone {MASK}"
    assert masker.mask(base64.b64encode(url.encode()).decode()) == f"{MASK}Q="
    assert masker.mask(f"{token} {url}") == f"{MASK} {MASK}"
    assert masker.values == (url, token)


def test_a_core_cut_short_is_no_secret() -> None:
    line = "[0]<stdout>:loss 0.25 czNjcjN0LXQwa2Vu"
    assert SecretMasker([SECRET]).mask(line) == line


def test_longest_counts_the_forms() -> None:
    assert SecretMasker([SECRET]).longest == len("czNjcjN0LXQwa2VuI")
    assert SecretMasker(["a/b/c/d/e"]).longest == len("a%2Fb%2Fc%2Fd%2Fe")
    assert SecretMasker([]).longest == 0
