"""``python -m benchmarks.qh3_trial`` must not rot: every substitution it makes in a copy of
this checkout still applies, and the copy imports qh3 where it imported aioquic (no aioquic
import is left). The run itself (caddy, qh3) is the benchmark's, never asserted here."""

from __future__ import annotations

from pathlib import Path

from benchmarks.qh3_trial import SUBSTITUTIONS, build


def test_the_copy_is_made_and_imports_qh3_only(tmp_path: Path) -> None:
    build(tmp_path)
    http3 = tmp_path / "trio_retry" / "_wire" / "http3"
    shims = (http3 / "shims.py").read_text()
    assert "from qh3.quic.connection import" in shims
    assert "QpackDecoder(0, 0)" in shims
    for name, old, new in SUBSTITUTIONS:
        text = (http3 / name).read_text()
        assert (new in text) if new else (old not in text), name
    bench = (tmp_path / "benchmarks" / "http3.py").read_text()
    assert "import qh3" in bench
    assert "import aioquic" not in bench
