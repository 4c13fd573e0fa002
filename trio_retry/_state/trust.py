"""The fingerprint of a client's trust settings: what every persisted entry is bound to.

One job: a short digest that differs whenever the settings a ticket was earned under differ.
Why it matters: a resumed TLS 1.3 session (and its 0-RTT) is not authenticated by a
certificate again; the ticket stands for the check made when it was issued. A ticket earned
by a client that checked nothing (``verify=False``), or that trusted another CA, would let its
server be taken for the origin by a client that checks more. So a client uses only entries
whose fingerprint is its own.

What goes in: the verification switches (mode, host-name check, flags), the CA certificates
the context holds (DER, sorted), the default verify paths OpenSSL consults and, for a
``verify=`` directory of CA certificates (read lazily by OpenSSL), its listing (names, sizes,
modification times), and the client certificate presented over QUIC. It is worked out once,
when the client is built: a context that has verified servers since may hold more
certificates, which only makes its fingerprint differ (no resumption), never match wrongly.
"""

from __future__ import annotations

import hashlib
import os
import ssl

__all__ = ["trust_fingerprint"]


def trust_fingerprint(
    context: ssl.SSLContext, verify: object, client_certificate: bytes | None
) -> str:
    """64 hex digits naming ``context``'s trust settings, ``verify=`` (a CA directory's
    listing) and the client certificate (DER) presented over QUIC, if any."""
    digest = hashlib.sha256()

    def add(*parts: object) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else repr(part).encode("utf-8", "replace")
            digest.update(len(data).to_bytes(8, "big") + data)

    add(
        "trio_retry trust 1",
        int(context.verify_mode),
        context.check_hostname,
        int(context.verify_flags),
        getattr(context, "hostname_checks_common_name", None),
    )
    cas = context.get_ca_certs(binary_form=True)
    add(len(cas), *sorted(hashlib.sha256(der).digest() for der in cas))
    add(*ssl.get_default_verify_paths())
    if isinstance(verify, (str, os.PathLike)) and os.path.isdir(verify):
        add(_listing(os.fspath(verify)))
    add(client_certificate or b"")
    return digest.hexdigest()


def _listing(directory: str | bytes) -> list[tuple[str, int, int]]:
    """``(name, size, mtime_ns)`` of each file in ``directory``, sorted; empty if unreadable."""
    found: list[tuple[str, int, int]] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    info = entry.stat()
                except OSError:
                    continue
                found.append((os.fsdecode(entry.name), info.st_size, info.st_mtime_ns))
    except OSError:
        return []
    return sorted(found)
