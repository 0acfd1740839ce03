"""Process start-up tuning for the ASGI app (run from ``rewind/asgi.py`` only), each for a latency tail it cut.

- ``freeze_startup_heap``: the few hundred thousand objects a worker builds at start-up leave the garbage
  collector's sight, so a full collection no longer stalls every call in flight walking them;
- ``shorten_gil_turns``: the event loop gets the GIL back sooner from the threads running the calls' work.

Measured: see the benchmarks page.
"""

from __future__ import annotations

import gc
import sys
import threading

# -- the GIL's turns ---------------------------------------------------------------------------

GIL_SWITCH_INTERVAL_S = 0.001


def shorten_gil_turns() -> None:
    """A thread holding the GIL hands it over after 1 ms instead of 5 when the event loop asks."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


# -- the start-up heap ------------------------------------------------------------------------

_frozen = False
_freeze_lock = threading.Lock()


def freeze_startup_heap() -> None:
    """Collect once, then freeze what is left; later calls do nothing (one freeze per process)."""
    global _frozen
    with _freeze_lock:
        if _frozen:
            return
        _frozen = True
    gc.collect()
    gc.freeze()
