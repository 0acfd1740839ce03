"""How much of each sweep a run makes: all of it, or the quick run's share.

``make quicktest`` sets ``REWIND_TESTS_QUICK=1``; CI (``make test``) never does, so every
variant and every fuzz case still runs there. The quick run keeps a share that still touches
every behaviour: the simulator's ``hostile`` preset turns every UNKNOWN of the fact sheet the
other way at once, so ``default`` and ``hostile`` stand for the twenty presets one by one, and
the fuzzers draw fewer cases of the same strategies.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

QUICK = os.environ.get("REWIND_TESTS_QUICK") == "1"


def sweep[T](everything: Sequence[T], quick_share: Sequence[T]) -> list[T]:
    """``everything``, or in the quick run the ``quick_share`` of it (each of which must be in it)."""
    missing = [item for item in quick_share if item not in everything]
    if missing:
        raise ValueError(f"the quick share names what the sweep does not hold: {missing}")
    return list(quick_share if QUICK else everything)


def cases(variable: str, full: int, quick: int) -> int:
    """A fuzz size: ``variable`` from the environment if set, else ``full``, or ``quick`` in the quick run."""
    return int(os.environ.get(variable, quick if QUICK else full))
