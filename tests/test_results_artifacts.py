"""Artifact links: a real S3 HTTP endpoint (moto) on loopback, real downloads with requests."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import requests

from ci_runner.errors import StorageError
from ci_runner.results.artifacts import (
    CLOCK_SKEW,
    DEFAULT_EXPIRY_SECONDS,
    ArtifactLink,
    ArtifactListing,
    check_expiry,
    list_artifacts,
    make_s3_client,
    output_links,
)
from ci_runner.results.markdown import safe_url
from ci_runner.settings import read_settings

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing-access-key",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-key-canary",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(autouse=True)
def _no_real_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials and no config files: nothing here can reach real AWS."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in DUMMY_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint: str, _no_real_aws: None) -> Any:
    client = make_s3_client(read_settings({}).aws, endpoint_url=s3_endpoint)
    requests.post(f"{s3_endpoint}/moto-api/reset", timeout=10)
    client.create_bucket(Bucket="models")
    return client


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_links_download_the_real_objects(s3: Any, s3_endpoint: str) -> None:
    s3.put_object(Bucket="models", Key="proj/abc123/model (final).pt", Body=b"weights" * 10)
    s3.put_object(Bucket="models", Key="proj/abc123/logs/events.json", Body=b'{"a": 1}')
    s3.put_object(Bucket="models", Key="proj/abc123/", Body=b"")  # a folder marker
    s3.put_object(Bucket="models", Key="proj/abc1234/other.pt", Body=b"not ours")

    listing = list_artifacts("s3://models/proj/abc123", s3_client=s3, now=NOW)

    assert listing.warning is None
    assert [(link.name, link.size) for link in listing.links] == [
        ("logs/events.json", 8),
        ("model (final).pt", 70),
    ]
    assert listing.more == 0
    assert listing.expires_at == NOW + timedelta(days=7)
    for link in listing.links:
        assert link.url.startswith(f"{s3_endpoint}/models/proj/abc123/")
        assert "testing-secret-key-canary" not in link.url
        assert _query(link.url)["X-Amz-Expires"] == [str(DEFAULT_EXPIRY_SECONDS)]
        assert safe_url(link.url) == link.url  # the report links it unchanged
    response = requests.get(listing.links[1].url, timeout=10)
    assert response.status_code == 200
    assert response.content == b"weights" * 10


def test_expiry_is_configurable_and_signed(s3: Any) -> None:
    s3.put_object(Bucket="models", Key="out/model.pt", Body=b"m")
    before = datetime.now(timezone.utc).replace(microsecond=0)

    listing = list_artifacts("s3://models/out/", s3_client=s3, now=NOW, expires_in=90)

    query = _query(listing.links[0].url)
    assert query["X-Amz-Expires"] == ["90"]
    signed_at = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=timezone.utc
    )
    assert before - timedelta(seconds=5) <= signed_at <= datetime.now(timezone.utc)
    assert listing.expires_at == NOW + timedelta(seconds=90)
    # moto checks neither signatures nor expiry, so check the SigV4 signature here: the expiry
    # is signed, so a real S3 refuses the link after 90 s and refuses a lengthened one.
    url = listing.links[0].url
    assert _sigv4_valid(url, DUMMY_ENV["AWS_SECRET_ACCESS_KEY"])
    assert not _sigv4_valid(url.replace("X-Amz-Expires=90", "X-Amz-Expires=604800"), "x")
    assert not _sigv4_valid(
        url.replace("X-Amz-Expires=90", "X-Amz-Expires=604800"),
        DUMMY_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    assert requests.get(url, timeout=10).status_code == 200


def _sigv4_valid(url: str, secret: str) -> bool:
    """Recompute an S3 presigned URL's SigV4 signature (query auth, UNSIGNED-PAYLOAD)."""
    parts = urlsplit(url)
    pairs = [pair.split("=", 1) for pair in parts.query.split("&")]
    given = next(value for key, value in pairs if key == "X-Amz-Signature")
    canonical_query = "&".join(
        f"{key}={value}" for key, value in sorted(pairs) if key != "X-Amz-Signature"
    )
    query = dict(pairs)
    request = "\n".join(
        ["GET", parts.path, canonical_query, f"host:{parts.netloc}", "", "host", "UNSIGNED-PAYLOAD"]
    )
    scope = unquote(query["X-Amz-Credential"]).split("/", 1)[1]
    to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            query["X-Amz-Date"],
            scope,
            hashlib.sha256(request.encode()).hexdigest(),
        ]
    )
    key = ("AWS4" + secret).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.compare_digest(hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), given)


def test_listing_is_capped_with_a_count_of_the_rest(s3: Any) -> None:
    for i in range(7):
        s3.put_object(Bucket="models", Key=f"run/ckpt-{i}.pt", Body=b"x")

    listing = list_artifacts("s3://models/run", s3_client=s3, now=NOW, limit=3)

    assert [link.name for link in listing.links] == ["ckpt-0.pt", "ckpt-1.pt", "ckpt-2.pt"]
    assert listing.more == 4
    assert not listing.more_is_lower_bound


def test_empty_output_is_a_warning(s3: Any) -> None:
    listing = list_artifacts("s3://models/nothing/here", s3_client=s3, now=NOW)

    assert listing == ArtifactListing(
        "s3://models/nothing/here", warning="the job wrote nothing under s3://models/nothing/here"
    )


def test_missing_bucket_is_a_warning(s3: Any) -> None:
    listing = list_artifacts("s3://no-such-bucket/x", s3_client=s3, now=NOW)

    assert listing.links == ()
    assert listing.warning == "could not list s3://no-such-bucket/x: the bucket does not exist"


def test_unreachable_endpoint_is_a_warning() -> None:
    client = make_s3_client(
        read_settings({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}).aws, attempts=1
    )

    listing = list_artifacts("s3://models/out", s3_client=client, now=NOW)

    assert listing.links == ()
    assert listing.warning is not None
    assert listing.warning.startswith(
        'could not list s3://models/out: Could not connect to the endpoint URL: "http://127.0.0.1:9/'
    )
    assert "testing-secret-key-canary" not in listing.warning


def test_access_denied_is_a_warning() -> None:
    class DeniedPaginator:
        def paginate(self, **_: object) -> Iterator[dict[str, object]]:
            from botocore.exceptions import ClientError

            raise ClientError(
                {"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "ListObjectsV2"
            )

    class DeniedClient:
        def get_paginator(self, name: str) -> DeniedPaginator:
            assert name == "list_objects_v2"
            return DeniedPaginator()

    listing = list_artifacts("s3://models/out", s3_client=DeniedClient(), now=NOW)

    assert listing.warning == (
        "could not list s3://models/out: access denied (check the S3 credentials and bucket policy)"
    )


def test_no_client_for_s3_is_a_warning() -> None:
    listing = list_artifacts("s3://models/out", s3_client=None, now=NOW)

    assert listing.warning == "no S3 client configured to list outputs"


def test_local_outputs_are_paths(tmp_path: Path) -> None:
    out = tmp_path / "out dir"
    (out / "sub").mkdir(parents=True)
    (out / "model.pt").write_bytes(b"12345")
    (out / "sub" / "a.txt").write_text("a")

    listing = list_artifacts(out.as_uri(), s3_client=None, now=NOW)

    assert listing == ArtifactListing(
        out.as_uri(),
        links=(
            ArtifactLink("model.pt", str(out / "model.pt"), 5),
            ArtifactLink("sub/a.txt", str(out / "sub" / "a.txt"), 1),
        ),
        local=True,
    )
    assert list_artifacts(str(out), s3_client=None, now=NOW).links == listing.links


def test_local_missing_or_empty_is_a_warning(tmp_path: Path) -> None:
    uri = (tmp_path / "missing").as_uri()
    assert list_artifacts(uri, s3_client=None, now=NOW).warning == (
        f"the job wrote nothing under {uri}"
    )


def test_unknown_scheme_is_a_warning() -> None:
    listing = list_artifacts("gs://bucket/x", s3_client=None, now=NOW)

    assert listing.warning == "cannot list outputs at a gs:// location"


def test_expiry_outside_seven_days_is_a_clear_error() -> None:
    assert check_expiry(604800) == 604800
    with pytest.raises(StorageError) as error:
        list_artifacts("s3://b/x", s3_client=None, now=NOW, expires_in=604801)
    assert str(error.value) == (
        "artifact link expiry 604801 s is outside 1..604800; "
        "fix: S3 presigned links last at most 7 days, choose a value in that range"
    )


def _next_second() -> datetime:
    """The next whole second, once it has passed: S3 stamps objects to the second."""
    now = datetime.now(timezone.utc)
    boundary = now.replace(microsecond=0) + timedelta(seconds=1)
    time.sleep((boundary - now).total_seconds() + 0.05)
    return boundary


def test_objects_there_before_the_run_started_are_never_linked(s3: Any) -> None:
    # outputs: s3://other-teams-bucket/private/ lists another team's objects with the CI job's
    # keys: only what this run wrote may become a link anyone reading the MR can follow.
    s3.put_object(Bucket="models", Key="private/theirs.pt", Body=b"not this run's")
    started = _next_second()

    listing = list_artifacts("s3://models/private/", s3_client=s3, now=NOW, written_after=started)

    assert listing.links == ()
    assert listing.warning == (
        "the job wrote nothing under s3://models/private/ (1 object was there before this run "
        "started and is not linked)"
    )


def test_what_the_run_wrote_is_linked_and_what_was_there_is_counted(s3: Any) -> None:
    s3.put_object(Bucket="models", Key="run/old-1.pt", Body=b"old")
    s3.put_object(Bucket="models", Key="run/old-2.pt", Body=b"old")
    started = _next_second()
    s3.put_object(Bucket="models", Key="run/model.pt", Body=b"new")

    listing = list_artifacts("s3://models/run/", s3_client=s3, now=NOW, written_after=started)

    assert [link.name for link in listing.links] == ["model.pt"]
    assert listing.warning == (
        "2 objects were there before this run started and are not linked: only what this run "
        "wrote is linked"
    )


def test_the_run_s_start_is_taken_with_the_clocks_skew(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_text("written 10 s after our clock says the run started")
    started = datetime.now(timezone.utc) + timedelta(seconds=10)

    listing = output_links(tmp_path.as_uri(), read_settings({}).aws, NOW, started=started)

    assert [link.name for link in listing.links] == ["model.pt"]
    assert timedelta(seconds=30) == CLOCK_SKEW


def test_local_files_older_than_the_run_are_not_listed(tmp_path: Path) -> None:
    old = tmp_path / "out" / "old.txt"
    old.parent.mkdir()
    old.write_text("before")
    started = datetime.now(timezone.utc) + timedelta(seconds=5)
    new = tmp_path / "out" / "model.pt"
    new.write_text("after")
    os.utime(new, (started.timestamp() + 1, started.timestamp() + 1))

    listing = list_artifacts(
        (tmp_path / "out").as_uri(), s3_client=None, now=NOW, written_after=started
    )

    assert [(link.name, link.url) for link in listing.links] == [("model.pt", str(new))]
    assert listing.warning == (
        "1 object was there before this run started and is not linked: only what this run wrote "
        "is linked"
    )
