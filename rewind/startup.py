"""Process start-up tuning for the ASGI app, each with the reason it was measured for.

All run from ``rewind/asgi.py`` and nowhere else: they are about the process serving
requests, not about any one part of the product.

1. TCP_NODELAY on every accepted connection (``enable_tcp_nodelay``):
   TCP_NODELAY on every accepted connection, also under ``uvicorn --workers N``.

   With several workers uvicorn binds the listening socket itself as ``socket.socket(AF_INET)``,
   whose ``proto`` is 0. asyncio sets TCP_NODELAY on a new connection only when ``proto`` is
   ``IPPROTO_TCP``, so every connection of a multi-worker uvicorn runs with Nagle's algorithm:
   a response written in two pieces (headers, then body) waits for the client's delayed ACK.
   Measured here: 44 ms per sequential request with 2 workers against 1.2 ms with one.

   ``enable_tcp_nodelay()`` widens asyncio's check to ``proto`` 0 on TCP stream sockets (which is TCP).
   It changes nothing else and is harmless where the check already passes. It serves asyncio's own
   loop (``uvicorn --loop asyncio``); uvloop, which uvicorn picks when it is installed (it is in the
   requirements), sets TCP_NODELAY on every TCP connection itself (measured: 0.2 ms per sequential
   request to ``uvicorn --workers 2``).

2. Freezing the start-up heap (``freeze_startup_heap``):
   Move what a worker built at start-up out of the garbage collector's sight.

   A uvicorn worker of this app holds a few hundred thousand long-lived objects (Django, the
   models, pydantic schemas, the MCP SDK). Every full collection walks all of them: measured
   here 55-90 ms per collection, a few times per thousand tool calls, and every call in flight
   waits for it; that was most of the /mcp latency tail (p99). ``gc.freeze()`` once the app is
   built puts those objects in the permanent generation, so a full collection only walks what
   was made since (measured: about 10 ms). Nothing is leaked: frozen objects are only those alive
   at start-up, and cycles made later are still collected.

3. Shorter turns of the GIL (``shorten_gil_turns``):
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
import socket
import sys
import threading
from asyncio import base_events
from typing import Any

# -- the GIL's turns ---------------------------------------------------------------------------

GIL_SWITCH_INTERVAL_S = 0.001


def shorten_gil_turns() -> None:
    """A thread holding the GIL hands it over after 1 ms instead of 5 when the event loop asks."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


# -- TCP_NODELAY -------------------------------------------------------------------------------

_original_set_nodelay = base_events._set_nodelay  # type: ignore[attr-defined]


def _set_nodelay(sock: Any) -> None:
    if (
        sock.family in {socket.AF_INET, socket.AF_INET6}
        and sock.type == socket.SOCK_STREAM
        and sock.proto in (0, socket.IPPROTO_TCP)
    ):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # e.g. the peer already closed; nothing to tune
        return
    _original_set_nodelay(sock)


def enable_tcp_nodelay() -> None:
    """Widen asyncio's TCP_NODELAY check to ``proto`` 0 stream sockets (idempotent)."""
    base_events._set_nodelay = _set_nodelay  # type: ignore[attr-defined]


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
