"""What a Celery worker's pool does, read from outside: its log's task lines and /proc.

``read_worker_log`` takes each finished task's line ("succeeded in Xs") as the interval it held a pool process.
``PoolSampler`` reads each pool process from /proc every ``SAMPLE_EVERY_S``: busy when it has more than one
thread, used CPU, or waits in the kernel where an idle pool does not; so it also counts the work around each
task, and reads somewhat higher than the log. Linux only.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

SAMPLE_EVERY_S = 0.1
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) (\S+) (.*)$")
_SUCCEEDED = re.compile(r"Task (\S+)\[[0-9a-f-]+\] succeeded in ([0-9.e+-]+)s")
_NOISE = ("No hostname was supplied",)  # kombu's warning on every filesystem-broker connection


@dataclass
class WorkerLog:
    spans: list[tuple[str, float, float]] = field(default_factory=list)  # task name, start, end (epoch s)
    problems: list[tuple[float, str]] = field(default_factory=list)  # when, the WARNING/ERROR line


def read_worker_log(path: Path) -> WorkerLog:
    out = WorkerLog()
    for line in path.read_text(errors="replace").splitlines():
        m = _LOG_LINE.match(line)
        if m is None:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logged
        level, message = m.group(2), m.group(4)
        ok = _SUCCEEDED.search(message)
        if ok is not None:
            out.spans.append((ok.group(1), at - float(ok.group(2)), at))
        elif level in ("WARNING", "ERROR", "CRITICAL") and not any(n in message for n in _NOISE):
            out.problems.append((at, f"{level} {m.group(3)} {message}"[:300]))
    return out


def executing(spans: list[tuple[str, float, float]], names: set[str], start: float, end: float) -> tuple[int, float]:
    """The most, and the time-weighted mean, of the ``spans`` named in ``names`` running at once within [start, end]."""
    inside = [(max(s, start), min(e, end)) for n, s, e in spans if n in names and s < end and e > start]
    edges = sorted([(s, 1) for s, _ in inside] + [(e, -1) for _, e in inside])
    peak = level = 0
    area, last = 0.0, start
    for at, step in edges:
        area += level * (at - last)
        level += step
        peak = max(peak, level)
        last = at
    return peak, (area / (end - start) if end > start else 0.0)


@dataclass(frozen=True)
class Sample:
    at: float  # epoch s
    busy: int  # pool processes busy
    threads: int  # threads of all pool processes
    cpu_s: float  # CPU the pool used since the last sample


class PoolSampler:
    """Samples a prefork worker's pool processes from /proc in a thread of its own (``start``/``stop``)."""

    def __init__(self, worker_pid: int) -> None:
        self.children = children_of(worker_pid)
        self.tick = os.sysconf("SC_CLK_TCK")
        self.idle_wchans: set[str] = set()
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def learn_idle(self, seconds: float = 1.0) -> None:
        """Where the idle pool processes block (call while no task runs)."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.idle_wchans.update(_wchan(pid) for pid in self.children)
            time.sleep(SAMPLE_EVERY_S)
        self.idle_wchans.discard("0")  # on a CPU: never a sign of idleness

    def start(self) -> None:
        self._stop.clear()
        self.samples = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        last = {pid: cpu_and_threads(pid)[0] for pid in self.children}
        while not self._stop.wait(SAMPLE_EVERY_S):
            busy = threads = ticks = 0
            for pid in self.children:
                cpu, nthreads = cpu_and_threads(pid)
                if nthreads > 1 or cpu > last[pid] or _wchan(pid) not in self.idle_wchans:
                    busy += 1
                threads += nthreads
                ticks += cpu - last[pid]
                last[pid] = cpu
            self.samples.append(Sample(time.time(), busy, threads, ticks / self.tick))

    def over(self, start: float, end: float) -> tuple[int, float, float, int]:
        """Most and mean busy pool processes, their CPU seconds, and the most pool threads, within [start, end]."""
        inside = [s for s in self.samples if start <= s.at <= end]
        if not inside:
            return 0, 0.0, 0.0, 0
        return (
            max(s.busy for s in inside),
            statistics.mean(s.busy for s in inside),
            sum(s.cpu_s for s in inside),
            max(s.threads for s in inside),
        )


def children_of(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        if fields.get("PPid", "").strip() == str(pid):
            found.append(int(status.parent.name))
    return sorted(found)


def cpu_and_threads(pid: int) -> tuple[int, int]:
    """(utime + stime in ticks, threads) of ``pid``; (0, 0) once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0
    return int(fields[11]) + int(fields[12]), int(fields[17])  # fields 14, 15 and 20 of proc_pid_stat(5)


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return "?"
