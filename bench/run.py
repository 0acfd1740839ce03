#!/usr/bin/env python
"""``make bench``: every benchmark under bench/, one after the other, and their figures as one table.

Each runs as a process of its own (``--quick`` for a few minutes' size), its log and JSON under
var/bench/<time>/; the table and var/bench/latest.json follow, for ``bench/compare.py``. A benchmark that fails
is reported with the tail of its log; the others still run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import PYTHON, REPO
from bench.figures import Figure, figures_from_json
from rewind.lib.processes import Proc

RUNS = REPO / "var" / "bench"
NOT_BENCHMARKS = {"run", "compare", "figures"}


def benchmarks() -> list[str]:
    """Every benchmark script under bench/, by name: the helpers' modules start with ``_``."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_") and p.stem not in NOT_BENCHMARKS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="each benchmark at its few minutes' size")
    parser.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    parser.add_argument("--time-limit", type=float, default=3600.0, help="seconds one benchmark may take")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or benchmarks()
    unknown = sorted(set(names) - set(benchmarks()))
    if unknown:
        raise SystemExit(f"no such benchmark: {', '.join(unknown)} (there are: {', '.join(benchmarks())})")

    started = datetime.now(UTC)
    out = RUNS / started.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    results: dict[str, Any] = {
        "started": started.isoformat(),
        "quick": args.quick,
        "cores": os.cpu_count(),
        "load_before": os.getloadavg()[0],
        "benches": {},
    }
    print(f"{len(names)} benchmarks, {'quick' if args.quick else 'full'} size; logs and figures in {out}", flush=True)
    for name in names:
        results["benches"][name] = run_one(name, out, quick=args.quick, time_limit=args.time_limit)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    shutil.copyfile(out / "results.json", RUNS / "latest.json")
    print()
    print(table(results))
    failed = [n for n, r in results["benches"].items() if not r["ok"]]
    if failed:
        raise SystemExit(f"\n{len(failed)} benchmark(s) failed: {', '.join(failed)} (see their logs in {out})")


def run_one(name: str, out: Path, *, quick: bool, time_limit: float) -> dict[str, Any]:
    print(f"  {name} ...", end=" ", flush=True)
    json_path, log = out / f"{name}.json", out / f"{name}.log"
    argv = [PYTHON, str(REPO / "bench" / f"{name}.py"), "--json", str(json_path)] + (["--quick"] if quick else [])
    began = time.monotonic()
    proc = Proc(name, argv, log=log, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        proc.wait_until(lambda: not proc.running(), what="finished", timeout=time_limit)
    except Exception:
        proc.stop(timeout=30)
    seconds = time.monotonic() - began
    ok = proc.returncode == 0 and json_path.exists()
    print(f"{'done' if ok else 'FAILED'} in {seconds:.0f} s", flush=True)
    if not ok:
        print("    " + "\n    ".join(proc.output().splitlines()[-15:]), flush=True)
    report = json.loads(json_path.read_text()) if json_path.exists() else {"figures": []}
    return {"ok": ok, "seconds": round(seconds, 1), "returncode": proc.returncode, "figures": report["figures"]}


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "n/a"
    text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"
    return f"{text} {unit}".strip()


def table(results: dict[str, Any]) -> str:
    header = ("figure", "value", "target", "reference (same run)", "ratio", "± spread", "met")
    rows: list[tuple[str, ...]] = []
    for bench, result in results["benches"].items():
        rows.append((f"[{bench}]" + ("" if result["ok"] else "  FAILED"), "", "", "", "", "", ""))
        for figure in figures_from_json(result):
            rows.append(_row(figure))
    widths = [min(max(len(r[i]) for r in [header, *rows]), 70 if i == 0 else 40) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c[:w].ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    notes = [
        f"  {f.name}: {f.note}"
        for result in results["benches"].values()
        for f in figures_from_json(result)
        if f.note and f.met is False
    ]
    if notes:
        lines += ["", "targets not met, and what bounds them:", *notes]
    return "\n".join(lines)


def _row(f: Figure) -> tuple[str, ...]:
    target = f"{'≤' if f.better == 'lower' else '≥'} {fmt(f.target, f.unit)}" if f.target is not None else ""
    reference = f"{fmt(f.reference, f.unit)} {f.reference_name}".strip() if f.reference is not None else ""
    met = "" if f.met is None else "yes" if f.met else "NO"
    return ("  " + f.name, fmt(f.value, f.unit), target, reference, fmt(f.ratio), fmt(f.spread), met)


if __name__ == "__main__":
    main()
