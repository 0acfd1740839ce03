"""What every benchmark reports: its figures, each beside its target and the reference measured in the same run.

A benchmark parses its options with ``parse_args`` (which adds ``--quick`` and ``--json``), adds a ``Figure``
for each number worth keeping, and ends with ``report.write()``. A figure carries the yardstick measured beside
it (so a slow spell of the shared machine hits both) and its run-to-run spread, so a comparison flags only a
change larger than that.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

Better = Literal["lower", "higher"]


@dataclass
class Figure:
    name: str
    value: float
    unit: str = ""
    better: Better = "lower"
    target: float | None = None
    reference: float | None = None  # measured beside it in the same run
    reference_name: str = ""
    spread: float | None = None  # half the range of the rounds it was measured over, in its unit
    note: str = ""  # what bounds it, where the target cannot be met

    @property
    def ratio(self) -> float | None:
        return self.value / self.reference if self.reference else None

    @property
    def met(self) -> bool | None:
        if self.target is None or math.isnan(self.value):
            return None
        return self.value <= self.target if self.better == "lower" else self.value >= self.target


def spread_of(samples: Sequence[float]) -> float | None:
    """Half the range of a figure's rounds: how far one run of it strays from another here."""
    return (max(samples) - min(samples)) / 2 if len(samples) > 1 else None


class Report:
    """The figures of one benchmark run, written as JSON where ``--json`` says."""

    def __init__(self, bench: str, args: argparse.Namespace, shape: str = "") -> None:
        self.bench = bench
        self.path: Path | None = args.json
        self.quick: bool = args.quick
        self.shape = shape  # after every figure's name: figures of another shape never compare
        self.figures: list[Figure] = []

    def add(self, name: str, value: float, unit: str = "", **details: Any) -> Figure:
        figure = Figure(name + self.shape, float(value), unit, **details)
        self.figures.append(figure)
        return figure

    def write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.as_json(), indent=1, allow_nan=True))

    def as_json(self) -> dict[str, Any]:
        return {"bench": self.bench, "quick": self.quick, "figures": [asdict(f) for f in self.figures]}


def figures_from_json(data: Mapping[str, Any]) -> list[Figure]:
    return [Figure(**f) for f in data["figures"]]


def parse_args(parser: argparse.ArgumentParser, quick: Mapping[str, Any]) -> argparse.Namespace:
    """The options, with ``quick``'s values as defaults under ``--quick`` (a few minutes' size).

    Options given on the command line win over both sizes.
    """
    parser.add_argument("--quick", action="store_true", help=f"a few minutes' size: {_sizes(quick)}")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here (bench/run.py reads it)")
    known, _ = parser.parse_known_args()
    if known.quick:
        parser.set_defaults(**quick)
    return parser.parse_args()


def _sizes(values: Mapping[str, Any]) -> str:
    return ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in values.items())
