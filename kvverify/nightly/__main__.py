"""``python -m kvverify.nightly``: what ``.github/workflows/nightly.yml`` runs between shards.

* ``merge --into DIR [--previous DIR] SHARD_DIR...`` — tomorrow's database from tonight's shard
  artifacts (:mod:`kvverify.nightly.merge`); prints what it did.
* ``coverage [--observed DIR] [--label L] [--target T] [--json OUT] [--combine SUMMARY...]`` —
  a shard's (or all shards') coverage table as markdown on stdout (:mod:`kvverify.nightly.coverage`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from kvverify.errors import KVVerifyError


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvverify.nightly", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge shard example databases (deletions survive)")
    m.add_argument("shards", nargs="*", metavar="SHARD_DIR", help="downloaded shard artifacts")
    m.add_argument("--into", required=True, metavar="DIR", help="a new or empty directory: the merged database")
    m.add_argument("--previous", metavar="DIR", help="last night's merged database (restored from the cache)")
    m.add_argument("--max-carry", type=int, default=None, metavar="N",
                   help="nights a key nobody owns is carried over (3)")
    c = sub.add_parser("coverage", help="the coverage table from Hypothesis observability output")
    c.add_argument("--observed", default=None, metavar="DIR", help="observation files (.hypothesis/observed)")
    c.add_argument("--label", default="", help="this shard's name in the table")
    c.add_argument("--target", default="", help="the target the shard fuzzed")
    c.add_argument("--json", metavar="OUT", help="also write the summary (JSON) there")
    c.add_argument("--combine", nargs="+", metavar="SUMMARY", help="add up shard summaries instead")
    c.add_argument("--title", default="What was tested", help="the table's heading")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "merge":
            from kvverify.nightly.merge import MAX_CARRY, merge_directories
            stats = merge_directories(args.shards, args.into, previous=args.previous,
                                      max_carry=MAX_CARRY if args.max_carry is None else args.max_carry)
            print(stats.line())
            return 0
        from kvverify.nightly import coverage
        if args.combine:
            doc = coverage.combine([coverage.load(p) for p in args.combine])
        else:
            files = coverage.observation_files(args.observed)
            doc = coverage.summarize(files, label=args.label, target=args.target)
        if args.json:
            from kvverify.reports.common import atomic_write_text
            atomic_write_text(Path(args.json), json.dumps(doc, indent=1, sort_keys=True) + "\n")
        sys.stdout.write(coverage.markdown(doc, title=args.title))
        return 0
    except KVVerifyError as e:
        print(f"python -m kvverify.nightly {args.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
