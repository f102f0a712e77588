"""What a finished job wrote under its output URI, as download links for the report.

``s3://bucket/prefix`` is listed with a boto3 S3 client passed in (built at the edge by
:func:`make_s3_client`; any S3-compatible endpoint) and each object gets a presigned GET URL.
``file://`` (or a plain path) is listed on this machine for local runs; links are the paths.
Storage trouble never fails the job: the listing then carries a ``warning`` the report shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from ci_runner.errors import StorageError, first_line
from ci_runner.http_policy import S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT
from ci_runner.settings import AwsSettings

DEFAULT_EXPIRY_SECONDS: Final = 7 * 24 * 3600
MAX_EXPIRY_SECONDS: Final = 7 * 24 * 3600  # SigV4 presigned URLs last at most 7 days
DEFAULT_LIMIT: Final = 50
# Objects counted past the listed ones before giving up counting ("and more than N more").
COUNT_LIMIT: Final = 10_000
# Only what the run wrote is linked: objects last modified after it started, less this much for
# the storage's clock against ours and its whole-second stamps. The ranks start writing seconds
# after the submission at the soonest; an object older than this was there before the run.
CLOCK_SKEW: Final = timedelta(seconds=30)


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


def make_s3_client(aws: AwsSettings, endpoint_url: str | None = None, *, attempts: int = 3) -> Any:
    """A boto3 S3 client: credentials and region from the standard AWS variables (``aws``)
    (else boto3's own chain: config files, instance roles); endpoint from ``endpoint_url``, else
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``.

    With a custom endpoint (MinIO, Ceph) path-style addressing is used: it needs no wildcard DNS.
    """
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=aws.access_key_id,
        aws_secret_access_key=aws.secret_access_key,
        aws_session_token=aws.session_token,
        region_name=aws.region,
    )

    endpoint = endpoint_url or aws.endpoint_url
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
    written_after: datetime | None = None,
) -> ArtifactListing:
    """Links to the objects under ``output_uri`` (sorted by name, at most ``limit``) last
    modified at ``written_after`` or later: a location that held other objects before the run
    never links them.

    ``now`` (from the injected clock) dates the links' expiry. Never raises for storage
    trouble: unreachable endpoint, denied access, missing bucket or nothing written give a
    listing with a ``warning``.
    """
    check_expiry(expires_in)
    parts = urlsplit(output_uri)
    tally = _Tally(limit, written_after)
    if parts.scheme == "s3":
        if s3_client is None:
            return ArtifactListing(output_uri, warning="no S3 client configured to list outputs")
        return _list_s3(output_uri, parts.netloc, parts.path, s3_client, now, expires_in, tally)
    if parts.scheme in ("file", ""):
        path = Path(unquote(parts.path) if parts.scheme else output_uri)
        return _list_local(output_uri, path, tally)
    return ArtifactListing(
        output_uri, warning=f"cannot list outputs at a {parts.scheme}:// location"
    )


class _Tally:
    """The objects a listing keeps (the first ``limit`` written since ``since``) and counts."""

    def __init__(self, limit: int, since: datetime | None) -> None:
        self.limit, self.since = limit, since
        self.kept: list[tuple[str, int]] = []
        self.total = self.older = 0

    def add(self, name: str, size: int, modified: datetime) -> None:
        if self.since is not None and modified < self.since:
            self.older += 1
        else:
            self.total += 1
            if len(self.kept) < self.limit:
                self.kept.append((name, size))

    @property
    def full(self) -> bool:
        return self.total >= COUNT_LIMIT

    def listing(self, uri: str, links: tuple[ArtifactLink, ...], **more: Any) -> ArtifactListing:
        """The listing of ``links``, or why there are none."""
        if not links:
            return ArtifactListing(uri, warning=_nothing_written(uri, self.older), **more)
        return ArtifactListing(
            uri,
            links=links,
            more=self.total - len(links),
            more_is_lower_bound=self.full,
            warning=_older_left_out(self.older),
            **more,
        )


def _list_s3(
    uri: str,
    bucket: str,
    path: str,
    client: Any,
    now: datetime,
    expires_in: int,
    tally: _Tally,
) -> ArtifactListing:
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = path.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if not bucket:
        return ArtifactListing(uri, warning="the output URI names no bucket")
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for entry in page.get("Contents", ()):
                key = str(entry["Key"])
                if not key.endswith("/"):  # else a "folder" marker, not an artifact
                    tally.add(key, int(entry.get("Size", 0)), entry["LastModified"])
            if tally.full:
                break
        links = tuple(
            ArtifactLink(
                name=key[len(prefix) :],
                url=client.generate_presigned_url(
                    "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_in
                ),
                size=size,
            )
            for key, size in tally.kept
        )
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        return ArtifactListing(uri, warning=f"could not list {uri}: {_s3_reason(str(code))}")
    except BotoCoreError as error:
        return ArtifactListing(uri, warning=f"could not list {uri}: {_error_line(str(error))}")
    expires_at = now + timedelta(seconds=expires_in) if links else None
    return tally.listing(uri, links, expires_at=expires_at)


def _nothing_written(uri: str, older: int) -> str:
    warning = f"the job wrote nothing under {uri}"
    return f"{warning} ({_older(older)})" if older else warning


def _older_left_out(older: int) -> str | None:
    return f"{_older(older)}: only what this run wrote is linked" if older else None


def _older(count: int) -> str:
    if count == 1:
        return "1 object was there before this run started and is not linked"
    return f"{count} objects were there before this run started and are not linked"


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


def _list_local(uri: str, root: Path, tally: _Tally) -> ArtifactListing:
    if not root.is_dir():
        return ArtifactListing(uri, warning=f"the job wrote nothing under {uri}", local=True)
    try:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                stat = path.stat()
                modified = datetime.fromtimestamp(stat.st_mtime, timezone.utc)
                tally.add(path.relative_to(root).as_posix(), stat.st_size, modified)
            if tally.full:
                break
    except OSError as error:
        return ArtifactListing(
            uri, warning=f"could not list {uri}: {error.strerror or error}", local=True
        )
    links = tuple(
        ArtifactLink(name, str((root / name).resolve()), size) for name, size in tally.kept
    )
    return tally.listing(uri, links, local=True)


def output_links(
    uri: str,
    aws: AwsSettings,
    now: datetime,
    expires_in: int = DEFAULT_EXPIRY_SECONDS,
    *,
    started: datetime | None = None,
) -> ArtifactListing:
    """The files the run wrote under its output URI (since ``started``, less
    :data:`CLOCK_SKEW`) with links valid ``expires_in`` seconds (S3 through a client made from
    ``aws``)."""
    client = make_s3_client(aws) if uri.startswith("s3://") else None
    since = started - CLOCK_SKEW if started is not None else None
    return list_artifacts(
        uri, s3_client=client, now=now, expires_in=expires_in, written_after=since
    )
