"""The same Trio driver over qh3 instead of aioquic: ``python -m benchmarks.qh3_trial [ARGS]``.

qh3 is aioquic's fork with its QUIC engine (packets, crypto, recovery) in Rust and its HTTP/3
layer still in Python, with aioquic's module layout. This tool copies this checkout's
``trio_retry`` and ``benchmarks`` into a temporary directory, makes the copy import qh3
wherever it imported aioquic, adapts the few places where qh3's names differ (below), and runs
``python -m benchmarks.http3 ARGS`` there (needs ``pip install qh3``). Nothing of it ships: it
measures what a port would give, with the client's driver, UDP batches, frame checks and
streams unchanged. What the copy gives up, so its figures are an upper bound of a port's:

- 0-RTT: qh3 keeps its keys and stream offsets in its Rust core, where the client cannot read
  which packets carried a request (``shims.CheckedQuicConnection.zero_rtt_visible`` is false:
  nothing is sent early);
- address-validation tokens (qh3's ``QuicConfiguration`` and ``QuicConnection`` take none);
- the acknowledgement riding with the next request (qh3 has no ``_spaces``: a no-op);
- upload pacing by acknowledged offsets (``shims.CheckedQuicConnection.stream_offsets`` finds no
  ``_streams``).

The server's chain is still checked by the client's ``ssl.SSLContext`` (qh3's certificates are
turned into DER with their own ``public_bytes()``). Each substitution must apply: one that
finds nothing fails the run (this checkout changed; adapt it here).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (file under trio_retry/_wire/http3, text, replacement): qh3's names where aioquic's differ.
SUBSTITUTIONS: tuple[tuple[str, str, str], ...] = (
    ("shims.py", "import pylsqpack\n", "from qh3._hazmat import QpackDecoder\n"),
    (
        "shims.py",
        'isinstance(getattr(self, "_decoder", None), pylsqpack.Decoder)',
        'hasattr(self, "_decoder")',
    ),
    ("shims.py", "pylsqpack.Decoder(0, 0)", "QpackDecoder(0, 0)"),
    (
        "shims.py",
        "isinstance(leaf, x509.Certificate):\n"
        "            der = [cert.public_bytes(Encoding.DER) for cert in [leaf, *chain]]",
        "leaf is not None:\n            der = [cert.public_bytes() for cert in [leaf, *chain]]",
    ),
    (
        "shims.py",
        "        tls = self.tls\n",
        "        tls = getattr(getattr(self, '_tls', None), 'tls', None)\n"
        "        if tls is None:\n            return\n",
    ),
    ("shims.py", "if tls.state is State.CLIENT_POST_HANDSHAKE:", "if self._handshake_complete:"),
    ("shims.py", " and not tls.session_resumed", ""),
    ("shims.py", "self.zero_rtt_visible = (", "self.zero_rtt_visible = False and ("),
    ("shims.py", "            token_handler=token_handler,\n", ""),
    ("quic.py", "        token=token,\n", ""),
    ("qpack.py", "import pylsqpack", "from qh3._hazmat import QpackDecoder"),
    ("qpack.py", "pylsqpack.Decoder(0, 0)", "QpackDecoder(0, 0)"),
)


def build(into: Path) -> None:
    """This checkout's ``trio_retry`` and ``benchmarks`` in ``into``, made to run over qh3.
    Raises ``RuntimeError`` naming a substitution that found nothing."""
    for package in ("trio_retry", "benchmarks"):
        shutil.copytree(ROOT / package, into / package)
    for path in into.rglob("*.py"):
        text = path.read_text()
        changed = re.sub(r"\b(from|import) aioquic\b", r"\1 qh3", text)
        if changed != text:
            path.write_text(changed)
    http3 = into / "trio_retry" / "_wire" / "http3"
    for name, old, new in SUBSTITUTIONS:
        path = http3 / name
        text = path.read_text()
        if old not in text:
            raise RuntimeError(f"qh3_trial: {name} no longer has {old.strip()!r}: adapt it")
        path.write_text(text.replace(old, new))
    left = [
        str(p) for p in into.rglob("*.py") if re.search(r"\b(from|import) aioquic\b", p.read_text())
    ]
    if left:
        raise RuntimeError(f"qh3_trial: still importing aioquic: {left}")


def main(argv: list[str]) -> int:
    try:
        import qh3  # noqa: F401
    except ImportError:
        print("benchmarks.qh3_trial: needs qh3 (pip install qh3)")
        return 2
    with tempfile.TemporaryDirectory(prefix="qh3-trial-") as tmp:
        build(Path(tmp))
        command = [sys.executable, "-m", "benchmarks.http3", *argv]
        return subprocess.run(command, cwd=tmp, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
