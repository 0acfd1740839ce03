#!/usr/bin/env python
"""``make bench-compare``: one ``make bench`` run held against an earlier one, figure by figure.

Without arguments, the latest run against the one before it. A figure is WORSE when it moved the wrong way by
more than its run-to-run spread (10 % for one measured once), comparing ratios to a same-run reference where
there is one, so a slower machine does not read as a regression. Exits 1 when anything got worse.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.figures import Figure, figures_from_json
from bench.run import RUNS, fmt

NO_SPREAD_TOLERANCE = 0.10


def runs() -> list[Path]:
    return sorted(RUNS.glob("*/results.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("old", nargs="?", type=Path)
    parser.add_argument("new", nargs="?", type=Path)
    args = parser.parse_args()
    if args.old is None:
        found = runs()
        if len(found) < 2:
            raise SystemExit(f"need two runs of make bench under {RUNS} (found {len(found)})")
        args.old, args.new = found[-2], found[-1]
    elif args.new is None:
        args.new = RUNS / "latest.json"
    old, new = (json.loads(p.read_text()) for p in (args.old, args.new))
    print(f"old: {args.old} ({'quick' if old['quick'] else 'full'} size, started {old['started']})")
    print(f"new: {args.new} ({'quick' if new['quick'] else 'full'} size, started {new['started']})")
    if old["quick"] != new["quick"]:
        print("the two runs are of different sizes: figures that depend on the size differ for that reason")
    worse = compare(old, new)
    raise SystemExit(1 if worse else 0)


def _figures(run: dict[str, Any]) -> dict[tuple[str, str], Figure]:
    return {(bench, f.name): f for bench, result in run["benches"].items() for f in figures_from_json(result)}


def compare(old: dict[str, Any], new: dict[str, Any]) -> int:
    before, after = _figures(old), _figures(new)
    worse = 0
    for key, now in after.items():
        was = before.get(key)
        if was is None:
            print(f"  new      {key[0]}: {key[1]} = {fmt(now.value, now.unit)}")
            continue
        verdict, detail = judge(was, now)
        worse += verdict == "WORSE"
        print(f"  {verdict:<8} {key[0]}: {key[1]}: {detail}")
    for key in sorted(set(before) - set(after)):
        print(f"  gone     {key[0]}: {key[1]} (not in the new run)")
    print(f"\n{worse} figure(s) got worse by more than their run-to-run spread")
    return worse


def judge(was: Figure, now: Figure) -> tuple[str, str]:
    """(verdict, what moved): the ratio to the same-run reference where both have one, else the value."""
    if was.ratio is not None and now.ratio is not None:
        old_v, new_v, what = was.ratio, now.ratio, "ratio to its reference"
        # The spread of a ratio, relative: as the value's own, over the reference.
        tolerance = max((f.spread / f.reference) if f.spread is not None and f.reference else 0.0 for f in (was, now))
    else:
        old_v, new_v, what = was.value, now.value, now.unit or "value"
        tolerance = max(f.spread or 0.0 for f in (was, now))
    if was.spread is None and now.spread is None:
        tolerance = abs(old_v) * NO_SPREAD_TOLERANCE
    moved = new_v - old_v if now.better == "lower" else old_v - new_v  # > 0: the wrong way
    detail = f"{fmt(old_v)} -> {fmt(new_v)} {what} (spread ±{fmt(tolerance)})"
    if moved > tolerance:
        return "WORSE", detail
    if -moved > tolerance:
        return "better", detail
    return "same", detail


if __name__ == "__main__":
    main()
