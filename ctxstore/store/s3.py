"""Large blobs in an S3-compatible bucket: `S3Bucket`, a `BlobBucket` over boto3.

``S3Bucket("s3://bucket/prefix", endpoint_url="http://127.0.0.1:8333")`` keeps each key under
``prefix/``. A write is a conditional put (``If-None-Match: *``), so two hubs writing the same
content-addressed key write it once; a server that does not support conditional puts (it answers 501, or
ignores the header) is used with a look first (``HEAD``, then ``PUT``), which can write a key twice but
never differently, since the bytes under a key are a function of the key. The bucket is created if it
is missing. Every failure is a `StoreError` naming the endpoint, the bucket and what failed. This is the
only module that imports boto3 and botocore.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.config
import botocore.exceptions

from ..errors import InvalidInput, MissingObject, StoreError
from .blobs import check_key

__all__ = ["S3Bucket"]

_MISSING = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_EXISTS = {"412", "PreconditionFailed"}
_UNSUPPORTED = {"501", "NotImplemented"}
_RACING = {"409", "ConditionalRequestConflict"}


def _code(exc: botocore.exceptions.ClientError) -> str:
    error: dict[str, Any] = exc.response.get("Error", {})
    return str(error.get("Code", ""))


def _status(exc: botocore.exceptions.ClientError) -> str:
    meta: dict[str, Any] = exc.response.get("ResponseMetadata", {})
    return str(meta.get("HTTPStatusCode", ""))


class S3Bucket:
    """A `BlobBucket` in an S3-compatible service: keys under ``prefix/`` of one bucket.

    `url` is ``s3://bucket`` or ``s3://bucket/prefix``; `endpoint_url` the service (None: AWS, from the
    usual boto3 configuration); `access_key`/`secret_key`/`region` as for boto3 (None: its defaults,
    such as the ``AWS_*`` environment variables). With `create` the bucket is made if it is missing.
    `conditional` says whether the service honours ``If-None-Match: *`` on a put (None: find out on the
    first write). Safe to share between threads.
    """

    def __init__(self, url: str, *, endpoint_url: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, region: str | None = "us-east-1", create: bool = True,
                 conditional: bool | None = None, timeout: float = 30.0) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
            raise InvalidInput(f"not a bucket URL: {url!r} (expected s3://bucket or s3://bucket/prefix)")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self.endpoint = endpoint_url or "AWS S3"
        self._conditional = conditional
        config = botocore.config.Config(s3={"addressing_style": "path"}, connect_timeout=timeout,
                                        read_timeout=timeout, retries={"max_attempts": 3, "mode": "standard"})
        try:
            self._client: Any = boto3.client("s3", endpoint_url=endpoint_url, aws_access_key_id=access_key,
                                             aws_secret_access_key=secret_key, region_name=region, config=config)
        except (botocore.exceptions.BotoCoreError, ValueError) as exc:
            raise StoreError(f"cannot set up the S3 client for {self.endpoint}: {exc}") from None
        if create:
            self._create_bucket()

    def _failed(self, what: str, exc: Exception) -> StoreError:
        if isinstance(exc, botocore.exceptions.ClientError):
            detail = f"{_code(exc) or _status(exc)}: {exc.response.get('Error', {}).get('Message', '')}".rstrip(": ")
        else:
            detail = str(exc)
        return StoreError(f"S3 at {self.endpoint}, bucket {self.bucket}: {what} failed ({detail})")

    def _full(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _create_bucket(self) -> None:
        try:
            self._client.head_bucket(Bucket=self.bucket)
            return
        except botocore.exceptions.ClientError as exc:
            if _code(exc) not in _MISSING and _status(exc) != "404":
                raise self._failed("looking up the bucket", exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._failed("looking up the bucket", exc) from None
        try:
            self._client.create_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._failed("creating the bucket", exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._failed("creating the bucket", exc) from None

    # -- the BlobBucket protocol ---------------------------------------------------------------------

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store `data` under `key` unless it is there; returns whether this call wrote it."""
        full = self._full(key)
        if self._conditional is not False:
            for _attempt in range(3):
                try:
                    self._client.put_object(Bucket=self.bucket, Key=full, Body=bytes(data), IfNoneMatch="*")
                except botocore.exceptions.ClientError as exc:
                    code, status = _code(exc), _status(exc)
                    if code in _EXISTS or status in _EXISTS:
                        self._conditional = True
                        return False
                    if code in _RACING or status in _RACING:
                        continue  # another writer is putting the same key right now: look again
                    if code in _UNSUPPORTED or status in _UNSUPPORTED:
                        self._conditional = False
                        break
                    raise self._failed(f"writing {full}", exc) from None
                except botocore.exceptions.BotoCoreError as exc:
                    raise self._failed(f"writing {full}", exc) from None
                else:
                    return True
            else:
                return not self._exists(full) and self._put(full, data)
        if self._exists(full):
            return False
        return self._put(full, data)

    def _exists(self, full: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=full)
            return True
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in _MISSING or _status(exc) == "404":
                return False
            raise self._failed(f"looking up {full}", exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._failed(f"looking up {full}", exc) from None

    def _put(self, full: str, data: bytes) -> bool:
        try:
            self._client.put_object(Bucket=self.bucket, Key=full, Body=bytes(data))
            return True
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._failed(f"writing {full}", exc) from None

    def get(self, key: str) -> bytes:
        """The bytes under `key`; `MissingObject` if there are none."""
        full = self._full(key)
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=full)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in _MISSING or _status(exc) == "404":
                raise MissingObject(f"no key {full} in bucket {self.bucket} at {self.endpoint}") from None
            raise self._failed(f"reading {full}", exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._failed(f"reading {full}", exc) from None

    def delete(self, key: str) -> None:
        """Remove `key` (nothing happens if it is absent)."""
        full = self._full(key)
        try:
            self._client.delete_object(Bucket=self.bucket, Key=full)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in _MISSING or _status(exc) == "404":
                return
            raise self._failed(f"deleting {full}", exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._failed(f"deleting {full}", exc) from None

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key under `prefix` (relative to the bucket URL's prefix), page by page."""
        base = f"{self.prefix}/" if self.prefix else ""
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base + prefix, "MaxKeys": 1000}
            if token:
                args["ContinuationToken"] = token
            try:
                page = self._client.list_objects_v2(**args)
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                raise self._failed(f"listing {base + prefix}", exc) from None
            for item in page.get("Contents", []):
                yield str(item["Key"])[len(base):]
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if not token:
                return

    def close(self) -> None:
        """Release the client's connections."""
        close = getattr(self._client, "close", None)
        if close is not None:
            close()
