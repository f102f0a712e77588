"""Read and write whole files at file:// or s3:// URIs (a plain path counts as a local file).

S3 goes through boto3, which takes the endpoint from AWS_ENDPOINT_URL (MinIO, Ceph, moto) and the
credentials from the usual AWS_* variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


def join(base: str, name: str) -> str:
    """``name`` inside the directory-like URI ``base``."""
    return base.rstrip("/") + "/" + name


def _s3_client() -> Any:
    import boto3  # imported here so file:// runs need no boto3

    return boto3.client("s3")


def _split(uri: str) -> tuple[str, str, str]:
    """(scheme, bucket or "", key or local path)."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        return "s3", parsed.netloc, parsed.path.lstrip("/")
    if parsed.scheme == "file":
        return "file", "", unquote(parsed.path)
    if parsed.scheme == "":
        return "file", "", uri
    raise ValueError(f"unsupported URI {uri!r}: use file:// or s3://")


def read_bytes(uri: str) -> bytes:
    scheme, bucket, key = _split(uri)
    if scheme == "s3":
        body: bytes = _s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        return body
    return Path(key).read_bytes()


def write_bytes(uri: str, data: bytes) -> None:
    scheme, bucket, key = _split(uri)
    if scheme == "s3":
        _s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        return
    path = Path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
