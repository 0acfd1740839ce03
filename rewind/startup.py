"""Process start-up tuning for the ASGI app, each with the reason it was measured for.

All run from ``rewind/asgi.py`` and nowhere else: they are about the process serving
requests, not about any one part of the product.

1. Freezing the start-up heap (``freeze_startup_heap``):
   Move what a worker built at start-up out of the garbage collector's sight.

   A uvicorn worker of this app holds a few hundred thousand long-lived objects (Django, the
   models, pydantic schemas, the MCP SDK). Every full collection walks all of them: measured
   here 55-90 ms per collection, a few times per thousand tool calls, and every call in flight
   waits for it; that was most of the /mcp latency tail (p99). ``gc.freeze()`` once the app is
   built puts those objects in the permanent generation, so a full collection only walks what
   was made since (measured: about 10 ms). Nothing is leaked: frozen objects are only those alive
   at start-up, and cycles made later are still collected.

2. Shorter turns of the GIL (``shorten_gil_turns``):
   The event loop answers every call, and between its awaits it needs the GIL back from the
   threads that run the calls' database and ZVM work. A thread holding the GIL keeps it for up
   to ``sys.getswitchinterval()`` (5 ms by default) once another thread asks; a call waits for
   that at each of its awaits while a burst of guards is being created on the pool. Measured with
   ``bench/load.py`` (120 agents starting at once on 2 cores, a look-up taking 20 ms idle): the
   look-up p99 under load was 339-884 ms in four runs at 5 ms, 289-420 ms in three at 1 ms;
   ``bench/mcp_find.py --quick`` gave the same throughput and CPU per call at both.
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
