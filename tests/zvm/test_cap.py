"""The per-site request cap of the client library, counted in this process (no Django)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from rewind.zvm import LocalPacer, Stores, ZvmClient, ZvmError
from rewind.zvm.pacing import ARRIVAL_SLACK_S, next_slot, window_shape
from tests.helpers import TOKEN_CALL, calls, connection
from tests.simfixtures import SimHandle


def test_the_window_takes_a_burst_of_the_cap_then_one_per_window() -> None:
    n, window = window_shape(3)
    assert (n, window) == (3, 1.0 + ARRIVAL_SLACK_S)
    slots: list[float] = []
    for _ in range(7):
        slots.append(next_slot(slots, 100.0, n, window))
    assert slots == pytest.approx([100.0] * 3 + [100.0 + window] * 3 + [100.0 + 2 * window])


def test_fractional_caps_count_whole_requests_and_slow_caps_widen_the_window() -> None:
    assert window_shape(2.5) == (2, 1.0 + ARRIVAL_SLACK_S)
    assert window_shape(0.5) == (1, 2.0 + ARRIVAL_SLACK_S)
    for bad in (0, -1, 1001):
        with pytest.raises(ValueError, match="must be above 0"):
            window_shape(bad)


def test_a_local_pacer_tells_each_request_how_long_to_wait() -> None:
    now = [50.0]
    pacer = LocalPacer(clock=lambda: now[0])
    waits = [pacer.reserve("zvm", 2) for _ in range(5)]
    window = 1.0 + ARRIVAL_SLACK_S
    assert waits == pytest.approx([0.0, 0.0, window, window, 2 * window])
    now[0] += 10  # long idle: a burst again
    assert pacer.reserve("zvm", 2) == 0.0


def test_threads_with_their_own_clients_stay_under_the_cap_and_all_succeed(sim: SimHandle) -> None:
    """Three clients of one ZVM in one process share its count; every call waits its turn."""
    pacer = LocalPacer()
    clients = [ZvmClient(connection(sim, max_requests_per_s=4.0), stores=Stores(pacer=pacer)) for _ in range(3)]
    errors: list[ZvmError] = []

    def work(client: ZvmClient) -> None:
        for _ in range(4):
            try:
                client.local_site()
            except ZvmError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    rate = sim.control("GET", "sites/site-a/rate")
    assert rate["requests"] == 3 * 4 + 3  # the logins count too (three clients, three tokens)
    assert calls(sim, "site-a", TOKEN_CALL) == 3
    assert rate["peak_per_s"] <= 4


def test_a_connection_without_a_cap_never_waits(sim: SimHandle) -> None:
    class Refuse:
        def reserve(self, key: str, per_s: float) -> float:
            raise AssertionError("an uncapped connection asked the pacer")

    client = ZvmClient(connection(sim), stores=Stores(pacer=Refuse()))
    assert client.local_site().name == "Site A"


class _CountingPacer:
    def __init__(self, waits: list[float]) -> None:
        self.waits = waits
        self.reserved = 0

    def reserve(self, key: str, per_s: float) -> float:
        self.reserved += 1
        return self.waits.pop(0) if self.waits else 0.0


def test_a_sender_that_wakes_late_takes_a_new_slot_instead_of_crowding_the_next_window() -> None:
    from rewind.zvm.transport import LATE_S, RESERVE_TRIES, Transport

    now = [0.0]

    def oversleep(seconds: float) -> None:
        now[0] += seconds + 0.5  # a busy core: it wakes half a second after its slot

    from rewind.zvm.connection import ZvmConnection

    conn = ZvmConnection(site_name="Site A", base_url="https://zvm.example", max_requests_per_s=10)
    pacer = _CountingPacer([0.2, 0.2, 0.0])
    Transport(conn, pacer=pacer, sleep=oversleep, clock=lambda: now[0]).pace("GET", "/v1/vpgs", "r1")
    assert pacer.reserved == 3, "two late wake-ups gave their slots up; the third slot was on time"

    on_time = _CountingPacer([0.2])
    Transport(conn, pacer=on_time, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0]).pace(
        "GET", "/v1/vpgs", "r2"
    )
    assert on_time.reserved == 1
    always_late = _CountingPacer([0.1] * 10)
    Transport(conn, pacer=always_late, sleep=oversleep, clock=lambda: now[0]).pace("GET", "/v1/vpgs", "r3")
    assert always_late.reserved == RESERVE_TRIES, "bounded: it is sent after a few tries anyway"
    assert LATE_S < ARRIVAL_SLACK_S

    # A reservation that returned after its slot (a commit that waited) is late already.
    slow_commit = _CountingPacer([-2 * LATE_S, -LATE_S / 2])
    Transport(conn, pacer=slow_commit, sleep=oversleep, clock=lambda: now[0]).pace("GET", "/v1/vpgs", "r4")
    assert slow_commit.reserved == 2, "the first slot had passed by more than LATE_S; the second by less"


class _SlowToConnect:
    """A TCP relay to the simulator whose every new connection takes ``delay`` seconds to set up
    (a slow handshake on a busy host, a far network); bytes on a set-up connection pass at once.

    With ``close_first``, the first connection is closed from the far end just after its TLS
    handshake (the client's second flight, then time for the server's session tickets), as a
    ZVM closes a connection it finds idle.
    """

    def __init__(self, target_url: str, delay: float, *, close_first: bool = False) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 443)
        self.delay = delay
        self.close_first = close_first
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = target_url.replace(parts.netloc, f"127.0.0.1:{self.port}", 1)
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            closing = self.close_first and self.connections == 1
            threading.Thread(target=self._relay, args=(client, closing), daemon=True).start()

    def _relay(self, client: socket.socket, closing: bool) -> None:
        time.sleep(self.delay)
        upstream = socket.create_connection(self.target)

        def after_handshake(flights: int) -> None:
            if closing and flights == 2:  # ClientHello, then the client's Finished
                threading.Timer(0.05, self._shut, args=(client, upstream)).start()

        threading.Thread(target=self._pipe, args=(client, upstream, after_handshake), daemon=True).start()
        threading.Thread(target=self._pipe, args=(upstream, client, lambda _: None), daemon=True).start()

    @classmethod
    def _pipe(cls, source: socket.socket, sink: socket.socket, on_chunk: Callable[[int], None]) -> None:
        chunks = 0
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
                chunks += 1
                on_chunk(chunks)
        cls._shut(source, sink)

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def test_a_request_whose_connection_was_slow_to_set_up_takes_a_new_slot_before_it_leaves(sim: SimHandle) -> None:
    """The slot is kept where the bytes leave: a handshake longer than the arrival slack would
    otherwise land the request in the next window beside the requests that own it."""
    relay = _SlowToConnect(sim.site_url("site-a"), delay=0.3)
    try:
        pacer = _CountingPacer([])  # every slot is free: only lateness takes a new one
        client = ZvmClient(connection(sim, base_url=relay.url, max_requests_per_s=10.0), stores=Stores(pacer=pacer))
        for _ in range(2):
            reserved, connections = pacer.reserved, relay.connections
            before = sim.control("GET", "sites/site-a/rate")["requests"]
            assert client.local_site().name == "Site A"
            sent = sim.control("GET", "sites/site-a/rate")["requests"] - before
            opened = relay.connections - connections
            # A request on a new connection is late by its set-up and takes a second slot; one on
            # a kept-alive connection is on time.
            assert pacer.reserved - reserved == sent + opened
        assert relay.connections >= 1
    finally:
        relay.close()


class _NextSlotLater(_CountingPacer):
    """The first slot is free; every later one comes ``later`` seconds after it is asked for."""

    def __init__(self, later: float) -> None:
        super().__init__([])
        self.later = later

    def reserve(self, key: str, per_s: float) -> float:
        super().reserve(key, per_s)
        return 0.0 if self.reserved == 1 else self.later


def test_a_fresh_tls_connection_waiting_for_its_new_slot_is_kept_though_the_tickets_made_it_readable(
    sim: SimHandle,
) -> None:
    """A TLS 1.3 server sends its session tickets just after the handshake; a late request that
    read them as a close reconnected, late again, until it ran out of tries."""
    relay = _SlowToConnect(sim.site_url("site-a"), delay=0.3)
    try:
        pacer = _NextSlotLater(0.2)  # long enough for the tickets to arrive before the bytes leave
        client = ZvmClient(connection(sim, base_url=relay.url, max_requests_per_s=10.0), stores=Stores(pacer=pacer))
        assert client.local_site().name == "Site A"
        assert relay.connections == 1
        assert pacer.reserved == 3, "the login, late once by its set-up; the call on the kept-alive connection"
    finally:
        relay.close()


def test_a_connection_the_zvm_closed_while_the_request_waited_for_its_new_slot_is_replaced(sim: SimHandle) -> None:
    """Sent on the closed connection, the login would fail: one attempt only, so no retry hides it."""
    relay = _SlowToConnect(sim.site_url("site-a"), delay=0.3, close_first=True)
    try:
        pacer = _NextSlotLater(0.3)
        conn = connection(sim, base_url=relay.url, max_requests_per_s=10.0, get_attempts=1)
        assert ZvmClient(conn, stores=Stores(pacer=pacer)).local_site().name == "Site A"
        assert relay.connections == 2
    finally:
        relay.close()
