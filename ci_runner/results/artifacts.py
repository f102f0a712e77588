"""What a finished job wrote under its output URI, as download links for the report.

``s3://bucket/prefix`` is listed with a boto3 S3 client passed in (built at the edge by
:func:`make_s3_client`; any S3-compatible endpoint) and each object gets a presigned GET URL.
``file://`` (or a plain path) is listed on this machine for local runs; links are the paths.
Storage trouble never fails the job: the listing then carries a ``warning`` the report shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from ci_runner.errors import StorageError, first_line
from ci_runner.http_policy import S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT

DEFAULT_EXPIRY_SECONDS: Final = 7 * 24 * 3600
MAX_EXPIRY_SECONDS: Final = 7 * 24 * 3600  # SigV4 presigned URLs last at most 7 days
DEFAULT_LIMIT: Final = 50
# Objects counted past the listed ones before giving up counting ("and more than N more").
COUNT_LIMIT: Final = 10_000


@dataclass(frozen=True)
class ArtifactLink:
    """One object: its key relative to the output location, a download link, its size."""

    name: str
    url: str  # presigned https URL (S3) or absolute path (local)
    size: int


@dataclass(frozen=True)
class ArtifactListing:
    """The links for the report; ``warning`` says why there are none (or why some are missing)."""

    location: str  # the expanded output URI
    links: tuple[ArtifactLink, ...] = ()
    more: int = 0  # objects not listed because of the limit
    more_is_lower_bound: bool = False  # counting stopped at COUNT_LIMIT
    warning: str | None = None
    expires_at: datetime | None = None  # when the S3 links stop working
    local: bool = False  # links are paths on this machine


def make_s3_client(
    environ: Mapping[str, str], endpoint_url: str | None = None, *, attempts: int = 3
) -> Any:
    """A boto3 S3 client: credentials and region from the standard AWS variables in ``environ``
    (else boto3's own chain: config files, instance roles); endpoint from ``endpoint_url``, else
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``.

    With a custom endpoint (MinIO, Ceph) path-style addressing is used: it needs no wildcard DNS.
    """
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID") or None,
        aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY") or None,
        aws_session_token=environ.get("AWS_SESSION_TOKEN") or None,
        # S3 signs with a region even where it has none (MinIO, Ceph): default to AWS's first.
        region_name=environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1",
    )

    endpoint = endpoint_url or environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path" if endpoint else "auto"},
        retries={"total_max_attempts": attempts, "mode": "standard"},
        connect_timeout=S3_CONNECT_TIMEOUT,
        read_timeout=S3_READ_TIMEOUT,
    )
    return session.client("s3", endpoint_url=endpoint or None, config=config)


def check_expiry(seconds: int) -> int:
    """``seconds`` when it is a valid presigned-URL lifetime, else a :class:`StorageError`."""
    if not 1 <= seconds <= MAX_EXPIRY_SECONDS:
        raise StorageError(
            f"artifact link expiry {seconds} s is outside 1..{MAX_EXPIRY_SECONDS}; "
            "fix: S3 presigned links last at most 7 days, choose a value in that range"
        )
    return seconds


def list_artifacts(
    output_uri: str,
    *,
    s3_client: Any | None,
    now: datetime,
    expires_in: int = DEFAULT_EXPIRY_SECONDS,
    limit: int = DEFAULT_LIMIT,
) -> ArtifactListing:
    """Links to the objects under ``output_uri`` (sorted by name, at most ``limit``).

    ``now`` (from the injected clock) dates the links' expiry. Never raises for storage
    trouble: unreachable endpoint, denied access, missing bucket or nothing written give a
    listing with a ``warning``.
    """
    check_expiry(expires_in)
    parts = urlsplit(output_uri)
    if parts.scheme == "s3":
        if s3_client is None:
            return ArtifactListing(output_uri, warning="no S3 client configured to list outputs")
        return _list_s3(output_uri, parts.netloc, parts.path, s3_client, now, expires_in, limit)
    if parts.scheme in ("file", ""):
        path = Path(unquote(parts.path) if parts.scheme else output_uri)
        return _list_local(output_uri, path, limit)
    return ArtifactListing(
        output_uri, warning=f"cannot list outputs at a {parts.scheme}:// location"
    )


def _list_s3(
    uri: str,
    bucket: str,
    path: str,
    client: Any,
    now: datetime,
    expires_in: int,
    limit: int,
) -> ArtifactListing:
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = path.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if not bucket:
        return ArtifactListing(uri, warning="the output URI names no bucket")
    objects: list[tuple[str, int]] = []
    total = 0
    stopped = False
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for entry in page.get("Contents", ()):
                key = str(entry["Key"])
                if key.endswith("/"):
                    continue  # a "folder" marker, not an artifact
                total += 1
                if len(objects) < limit:
                    objects.append((key, int(entry.get("Size", 0))))
            if total >= COUNT_LIMIT:
                stopped = True
                break
        links = tuple(
            ArtifactLink(
                name=key[len(prefix) :],
                url=client.generate_presigned_url(
                    "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_in
                ),
                size=size,
            )
            for key, size in objects
        )
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        return ArtifactListing(uri, warning=f"could not list {uri}: {_s3_reason(str(code))}")
    except BotoCoreError as error:
        return ArtifactListing(uri, warning=f"could not list {uri}: {_error_line(str(error))}")
    if not links:
        return ArtifactListing(uri, warning=f"the job wrote nothing under {uri}")
    return ArtifactListing(
        uri,
        links=links,
        more=total - len(links),
        more_is_lower_bound=stopped,
        expires_at=now + timedelta(seconds=expires_in),
    )


_S3_REASONS: Final = {
    "NoSuchBucket": "the bucket does not exist",
    "AccessDenied": "access denied (check the S3 credentials and bucket policy)",
    "InvalidAccessKeyId": "the access key is not known to the S3 endpoint",
    "SignatureDoesNotMatch": "the secret key does not match the access key",
}


def _s3_reason(code: str) -> str:
    return _S3_REASONS.get(code, f"S3 error {_error_line(code)}")


def _error_line(text: str) -> str:
    return first_line(text, ellipsis="...") or "unknown error"


def _list_local(uri: str, root: Path, limit: int) -> ArtifactListing:
    if not root.is_dir():
        return ArtifactListing(uri, warning=f"the job wrote nothing under {uri}", local=True)
    links: list[ArtifactLink] = []
    total = 0
    stopped = False
    try:
        for path in sorted(root.rglob("*")):
            if not path.is_file():
                continue
            total += 1
            if len(links) < limit:
                links.append(
                    ArtifactLink(
                        name=path.relative_to(root).as_posix(),
                        url=str(path.resolve()),
                        size=path.stat().st_size,
                    )
                )
            if total >= COUNT_LIMIT:
                stopped = True
                break
    except OSError as error:
        return ArtifactListing(
            uri, warning=f"could not list {uri}: {error.strerror or error}", local=True
        )
    if not links:
        return ArtifactListing(uri, warning=f"the job wrote nothing under {uri}", local=True)
    return ArtifactListing(
        uri,
        links=tuple(links),
        more=total - len(links),
        more_is_lower_bound=stopped,
        local=True,
    )


def output_links(
    uri: str, env: Mapping[str, str], now: datetime, expires_in: int = DEFAULT_EXPIRY_SECONDS
) -> ArtifactListing:
    """The files under the run's output URI with links valid ``expires_in`` seconds (S3
    through a client made from ``env``)."""
    client = make_s3_client(env) if uri.startswith("s3://") else None
    return list_artifacts(uri, s3_client=client, now=now, expires_in=expires_in)
