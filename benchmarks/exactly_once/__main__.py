"""``python -m benchmarks.exactly_once``: the fault lab and its scoreboard (issue #31).

Needs root (network namespaces, iptables, tc), iproute2, iptables and nginx; refuses in one
line otherwise (exit status 2). See docs/benchmarks.md, "The exactly-once scoreboard".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.exactly_once import report
from benchmarks.exactly_once.lab import RunConfig, rescore, run_lab
from benchmarks.exactly_once.netlab import LabError
from benchmarks.exactly_once.peers import PEERS


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.exactly_once", description=__doc__)
    p.add_argument("--seed", type=int, default=31)
    p.add_argument("--calls", type=int, default=3000, help="per client, at most (3000)")
    p.add_argument(
        "--seconds", type=float, default=30.0, help="per client: no call starts after (30)"
    )
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--deadline", type=float, default=2.0, help="per call, seconds (2.0)")
    p.add_argument("--max-delay", type=float, default=0.4, help="backend delay bound (0.4 s)")
    p.add_argument("--keepalive-requests", type=int, default=20, help="nginx's, small (20)")
    p.add_argument("--clients", default=",".join(PEERS), help="comma-separated subset")
    p.add_argument(
        "--no-faults",
        action="store_true",
        help="the baseline: the same run without faults (every column should be 0)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: at most 80 calls in 4 s, trio_retry only (options given still count)",
    )
    p.add_argument(
        "--rescore",
        type=Path,
        metavar="JSON",
        help="no lab: judge a recorded run (a --json document without --slim) again",
    )
    p.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    p.add_argument("--json", type=Path, help="write the document here")
    p.add_argument(
        "--slim", action="store_true", help="JSON without the calls and the ledger (to commit)"
    )
    p.add_argument("--chart", type=Path, help="draw the scoreboard here (.svg or .png)")
    args = p.parse_args(argv)
    if args.smoke:  # its values, where the command line does not give its own
        given = {arg.partition("=")[0] for arg in argv}
        smoke = {
            "--calls": 80, "--seconds": 4.0, "--concurrency": 4, "--deadline": 1.0,
            "--max-delay": 0.1, "--clients": "trio_retry",
        }  # fmt: skip
        for option, value in smoke.items():
            if option not in given:
                setattr(args, option[2:].replace("-", "_"), value)
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    cfg = RunConfig(
        seed=args.seed,
        calls=args.calls,
        seconds=args.seconds,
        concurrency=args.concurrency,
        deadline=args.deadline,
        max_delay=args.max_delay,
        keepalive_requests=args.keepalive_requests,
        clients=tuple(c for c in args.clients.split(",") if c),
        faults=not args.no_faults,
    )
    try:
        doc = rescore(json.loads(args.rescore.read_text())) if args.rescore else run_lab(cfg)
    except LabError as exc:
        print(f"exactly-once lab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; the lab was taken down", file=sys.stderr)
        return 130
    print()
    print(report.table(doc))
    if args.markdown:
        print("\n" + report.markdown(doc))
    extra = report.details(doc)
    if extra:
        print("\n" + extra)
    if args.json:
        report.write_json(doc, args.json, slim=args.slim)
    if args.chart:
        note = report.chart(doc, args.chart)
        if note:
            print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
