"""``-C -`` / ``--continue-at -``: continue a partial ``-o FILE`` where it stopped (curl's
meaning), but only if the server still has the same file (RFC 9110 §13.1.5 ``If-Range``).

Every ``-o FILE`` download whose response can be continued (a ``200`` with ``Accept-Ranges:
bytes`` and a strong validator: ``_resume.validator_of``) records that validator in a sidecar
file, ``FILE.trio-retry`` (JSON: the URL's SHA-256, never the URL itself, which may carry a
token; the ``If-Range`` value, the ETag, the length), before
the first byte is written; the sidecar is removed once the body is whole. ``-C -`` then asks
for the rest (``Range: bytes=SIZE-`` with ``If-Range``): a ``206`` that continues the same
representation is appended; a ``200`` (the file changed on the server) replaces the partial
file with the new one, whole; anything else leaves the file as it is and fails with the reason.
A partial file without a sidecar (not written by this command, or for another URL) is never
continued blind: that is a usage error saying so. A body with a ``Content-Encoding`` is not
recorded: the file holds it decoded, and its offset is not the server's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass

from .._models import Headers
from .._resume import Validator, continuation_headers, judge, validator_of

__all__ = ["Continued", "forget", "plan", "record", "verdict"]

SUFFIX = ".trio-retry"


@dataclass(frozen=True)
class Continued:
    """A ``-C -`` download: the bytes already in the file, and the validator they are of."""

    offset: int
    validator: Validator

    def headers(self) -> list[tuple[str, str]]:
        return list(continuation_headers(self.validator, self.offset))


def _sidecar(output: str) -> str:
    return output + SUFFIX


def _url_digest(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()


def plan(output: str, url: str) -> Continued | str | None:
    """What ``-C -`` does for ``-o output``: ``None`` (nothing there yet: a plain download), a
    :class:`Continued`, or why it cannot continue (a message for the usage error)."""
    try:
        offset = os.path.getsize(output)
    except OSError:
        return None
    if offset == 0:
        return None
    try:
        with open(_sidecar(output), encoding="utf-8") as f:
            saved = json.load(f)
        if saved["url"] != _url_digest(url):
            return (
                f"cannot continue {output!r}: it was downloaded from another URL; remove "
                "-C - to download it again"
            )
        validator = Validator(
            if_range=str(saved["if_range"]),
            etag=saved["etag"],
            length=saved["length"],
            encoding=None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return (
            f"cannot continue {output!r}: no validator was recorded for it (it was not written "
            f"by this command, or it is complete); without one the server's file may have "
            "changed, and the two would be spliced. Remove -C - to download it again"
        )
    if validator.length is not None and offset >= validator.length:
        return f"cannot continue {output!r}: it already holds all {validator.length} bytes"
    return Continued(offset, validator)


def record(output: str, url: str, status: int, headers: Headers) -> None:
    """Keep the validator of a fresh ``-o output`` download, if it has one (see the module);
    a previous record is dropped either way."""
    validator = validator_of(status, headers)
    if validator is None or validator.encoding is not None:
        forget(output)
        return
    document = {
        "url": _url_digest(url),
        "if_range": validator.if_range,
        "etag": validator.etag,
        "length": validator.length,
    }
    with open(_sidecar(output), "w", encoding="utf-8") as f:
        json.dump(document, f)


def forget(output: str) -> None:
    """The body is whole (or has no validator): no sidecar."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(_sidecar(output))


def verdict(continued: Continued, status: int, headers: Headers) -> str | None:
    """``"append"`` when the answer continues the file, ``"replace"`` when it is the whole of
    another representation (a ``200``), else ``None`` (see :func:`reason`)."""
    if judge(continued.validator, continued.offset, status, headers) is None:
        return "append"
    return "replace" if status == 200 else None


def reason(continued: Continued, status: int, headers: Headers) -> str:
    """Why the answer neither continues nor replaces the file."""
    return judge(continued.validator, continued.offset, status, headers) or ""
