#!/usr/bin/env python
"""Benchmark: a call held for a person, from the approving click to the forwarded call, and what held
calls hold while they wait.

    .venv/bin/python bench/approval.py [--rounds 10] [--held 100] [--quick] [--json F]

A fresh state folder, var/bench-approval (SQLite + filesystem broker): the ZVM simulator (sites A
and B), one Celery worker (prefork -c 2), the app under uvicorn with ONE worker process (so the
threads counted are those of the process holding every waiting call), and the guest shell over
HTTP as the upstream. The catalog entry guestshell/exec says ``approve``. Prints figures measured in
this one run; no asserts.

1. click to forward, the agent waiting (its call streams "waiting for a person" and the waiting call
   releases the call itself): --rounds calls one after the other; for each, the time from just before
   ``held_call_approve`` (what the page's click runs) to the moment the upstream answered, as the held
   call's ``finished_at`` records it (the same clock). p50 and max;
2. click to forward, the agent not waiting (``zerto-rewind/wait: false``): released by the task the
   approval queued, measured the same way;
3. --held calls waiting at once in one process (one client, one event loop): the uvicorn process's
   threads and open database connections (/proc: its threads, its open files on the database) before
   and while all of them wait, and the Celery tasks running meanwhile (none: a waiting call is no task).
   Then all are approved at once and the time until the last is forwarded is printed.
Target: p50 click-to-forward under 1 s in both shapes; the threads of the waiting process the same
(within the fixed pools: rewind.mcp.context) with --held calls waiting as with none.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import REPO, django_setup, fresh_dir, register_sites, start_worker

WORK = REPO / "var" / "bench-approval"


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def _uvicorn_child(parent: int) -> int:
    """The one uvicorn worker process (a child of the supervisor), else the process itself."""
    for task in Path(f"/proc/{parent}/task").iterdir():
        children = (task / "children").read_text().split()
        if children:
            return int(children[0])
    return parent


def _held_pk_after(after: int, timeout_s: float = 60) -> Any:
    from rewind.approvals.models import HeldCall

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        held = HeldCall.objects.filter(pk__gt=after, state="pending").order_by("pk").first()
        if held is not None:
            return held
        time.sleep(0.02)
    raise SystemExit("no call was held in time")


def _forwarded(held: Any, timeout_s: float = 60) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        held.refresh_from_db()
        if held.state == "forwarded" and held.finished_at is not None:
            return held.finished_at.timestamp()
        if held.state in ("refused", "denied", "expired"):
            raise SystemExit(f"held call #{held.pk} ended {held.state}: {held.refusal}")
        time.sleep(0.01)
    raise SystemExit(f"held call #{held.pk} was not forwarded in time")


async def _call(url: str, token: str, args: dict[str, Any], wait: bool) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    meta: Any = None if wait else {"zerto-rewind/wait": False}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=600.0)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto") as client:
            return await client.call_tool("guestshell__exec", args, meta=meta)


def click_to_forward(url: str, token: str, approver: Any, rounds: int, wait: bool) -> list[float]:
    from rewind.approvals.models import HeldCall
    from rewind.approvals.services import held_call_approve

    took = []
    for i in range(rounds):
        after = HeldCall.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        args = {"host": "web01", "command": f"echo round {i}"}
        caller = threading.Thread(target=lambda a=args: asyncio.run(_call(url, token, a, wait)))
        caller.start()
        held = _held_pk_after(after)
        clicked = time.time()
        held_call_approve(held_id=held.pk, user=approver, seen_digest=held.arguments_digest)
        took.append(_forwarded(held) - clicked)
        caller.join(60)
    return took


def many_waiting(url: str, token: str, approver: Any, uvicorn_pid: int, count: int) -> dict[str, Any]:
    from rewind.approvals.models import HeldCall
    from rewind.approvals.services import held_call_approve

    before = _threads(uvicorn_pid)
    after_pk = HeldCall.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    done = threading.Event()

    async def all_calls() -> None:
        await asyncio.gather(
            *(_call(url, token, {"host": "web01", "command": f"echo many {i}"}, True) for i in range(count))
        )
        done.set()

    runner = threading.Thread(target=lambda: asyncio.run(all_calls()))
    runner.start()
    deadline = time.monotonic() + 600
    while HeldCall.objects.filter(pk__gt=after_pk, state="pending").count() < count:
        if time.monotonic() > deadline:
            raise SystemExit("the calls were not all held in time")
        time.sleep(0.2)
    time.sleep(2)  # every call now only waits
    waiting = _threads(uvicorn_pid)
    held = list(HeldCall.objects.filter(pk__gt=after_pk, state="pending"))
    started = time.time()
    for h in held:
        held_call_approve(held_id=h.pk, user=approver, seen_digest=h.arguments_digest)
    last = max(_forwarded(h, 600) for h in held)
    runner.join(600)
    return {
        "held": count,
        "threads_before": before,
        "threads_while_waiting": waiting,
        "approve_all_to_last_forwarded_s": round(last - started, 2),
        "all_answered": done.is_set(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--held", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.held = 5, 20
    work = fresh_dir(WORK)
    django_setup(work, REWIND_LOOKUP_CACHE_S="10", REWIND_APPROVAL_WAIT_S="600")
    from rewind.lib.processes import Proc, free_port
    from tests.gateway.support import start_guestshell
    from tests.simfixtures import start_sim

    with contextlib.ExitStack() as stack:
        sim = start_sim(work / "sim")
        stack.callback(sim.stop)
        register_sites(sim.url, ["site-a", "site-b"])
        worker = start_worker(work, concurrency=2, name="bench-approval")
        stack.callback(worker.stop, timeout=30)
        port = free_port()
        app = Proc(
            "uvicorn",
            [sys.executable, "-m", "uvicorn", "rewind.asgi:application", "--port", str(port), "--workers", "1"],
            log=work / "uvicorn.log",
            cwd=REPO,
            env={**os.environ, "REWIND_PUBLIC_URL": f"http://127.0.0.1:{port}"},
        )
        app.wait_for_output("Application startup complete.", timeout=60)
        stack.callback(app.stop, timeout=15)
        shell = start_guestshell(work / "guestshell", sim)
        stack.callback(shell.stop)
        token, approver = _setup(shell)
        url = f"http://127.0.0.1:{port}/mcp"
        figures: dict[str, Any] = {}
        for name, wait in (("waiting", True), ("not_waiting", False)):
            took = click_to_forward(url, token, approver, args.rounds, wait)
            figures[f"click_to_forward_{name}_p50_s"] = round(statistics.median(took), 3)
            figures[f"click_to_forward_{name}_max_s"] = round(max(took), 3)
        figures.update(many_waiting(url, token, approver, _uvicorn_child(app.pid), args.held))
    for key, value in figures.items():
        print(f"{key:40} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def _setup(shell: Any) -> tuple[str, Any]:
    from django.contrib.auth.models import Permission, User

    from catalog.services import mutating_tool_add
    from rewind.agents import agent_create, agent_token_issue
    from rewind.audit import Actor
    from tests.gateway.support import add_http_upstream

    owner = User.objects.create_user("owner", password="x")
    approver = User.objects.create_user("approver", password="x", is_staff=True)
    approver.user_permissions.add(*Permission.objects.filter(codename__in=["approve_heldcall", "view_heldcall"]))
    approver = User.objects.get(pk=approver.pk)
    add_http_upstream(shell)
    mutating_tool_add(
        actor=Actor.user("admin"), pattern="guestshell/exec", vm_arg="host", description="shell", decision="approve"
    )
    agent = agent_create(actor=Actor.system("bench"), name="bench-agent", owner=owner)
    return agent_token_issue(actor=Actor.system("bench"), agent=agent).token, approver


if __name__ == "__main__":
    main()
