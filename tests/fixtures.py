"""pytest plugin for every test package: sites on the simulator, and the people who use the service.

Sites:
- ``sites`` (function): "Site A", "Site B" and "Site C" registered against the simulator
  through the services, each checked (its identity learned); ``{slug: Site}``. Only some of
  them with ``@pytest.mark.sites("site-a", "site-b")``.
- ``make_sites(sim, slugs)`` does the same from a fixture of a test's own (e.g. after a
  fixture that must come first); ``register_sites(sim, {"Site A": "site-a"})`` gives them by name.

Personas (each a ``User``; the passwords are ``pw-<name>`` or ``pw-<name>-123`` as below):
- ``agent_owner`` olivia: owns the test agents; holds the approval permission, which does not let
  her approve her own agent's requests;
- ``approver`` alice and ``second_approver`` bob: staff with the approval permission;
- ``staff_outsider`` mallory: staff without any permission;
- ``people``: those four together (``People``), as the recovery tests use them;
- ``fixer``: the agent "fixer", owned by ``agent_owner``, and ``tagged(vm, change_id, agent_name)``
  pinning a tagged checkpoint of a VM by hand, as that agent's guard would (tests.helpers);
- ``fresh_lookups``: every protection look-up asks the simulator (no look-up cache);
- ``outsider`` mallory: signed in, not staff, no permission (a different mallory: take one or
  the other);
- ``staff_no_perms`` sam, ``viewer`` vera (every view permission of the REST API) and
  ``superuser`` root.

Tasks:
- ``eager``: tasks queued on commit run at once, right there;
- ``inline_tasks`` (``InlineTasks``): the Celery messages this process sends are kept here and
  run in this process, each at its own time (countdown), by ``inline_tasks.wait_for(probe)``.
  For flows whose queue is not what the test is about (a guard's poll rounds that queue each
  other, a recovery's run): the worker's own task functions, with no broker and no worker.
  Tests of the queue itself (a killed worker, redelivery, the beat's sweeps restarting a dead
  chain, servers in other processes queueing work) use the real ``worker`` of tests.conftest.

Processes the tests start (the simulator, uvicorn, a Celery worker) are ``rewind.lib.processes.Proc``
(see tests.simfixtures, tests.mcpfixtures and tests.conftest).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from tests.simfixtures import PASSWORD, USERNAME, SimHandle

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from rewind.models import Agent, ChangeGuard
    from rewind.sites.models import Site

SITE_NAMES = {"site-a": "Site A", "site-b": "Site B", "site-c": "Site C"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sites(*slugs): which simulated sites the sites fixture registers")


def make_sites(
    sim: SimHandle, slugs: Iterable[str] = tuple(SITE_NAMES), *, names: Mapping[str, str] = SITE_NAMES
) -> dict[str, Site]:
    """The simulator's sites ``slugs`` registered (or reused, by name) and checked; ``{slug: Site}``."""
    from rewind.audit import Actor
    from rewind.sites import site_register

    out = {}
    for slug in slugs:
        check = site_register(
            actor=Actor.system("tests"),
            name=names[slug],
            base_url=sim.site_url(slug),
            username=USERNAME,
            password=PASSWORD,
        )
        assert check.ok, f"{names[slug]}: {check.error}"
        check.site.refresh_from_db()
        out[slug] = check.site
    return out


def register_sites(sim: SimHandle, slugs: Mapping[str, str]) -> dict[str, Site]:
    """Sites (name → slug) against the simulator, registered and checked; ``{name: Site}``."""
    by_slug = make_sites(sim, slugs.values(), names={slug: name for name, slug in slugs.items()})
    return {name: by_slug[slug] for name, slug in slugs.items()}


@pytest.fixture
def sites(request: pytest.FixtureRequest, sim: SimHandle, db: None) -> dict[str, Site]:
    marker = request.node.get_closest_marker("sites")
    return make_sites(sim, marker.args if marker is not None and marker.args else tuple(SITE_NAMES))


# --- personas ----------------------------------------------------------------------------------
APPROVE = (("recoveries", "approve_recovery"), ("recoveries", "view_recoveryrequest"))
VIEW_PERMS = (
    ("rewind", "view_auditevent"),
    ("rewind", "view_site"),
    ("rewind", "view_changeguard"),
    ("rewind", "view_agent"),
    ("catalog", "view_mutatingtool"),
    ("catalog", "view_toolsighting"),
)


def make_user(
    name: str, *, password: str, staff: bool = True, superuser: bool = False, perms: Sequence[tuple[str, str]] = ()
) -> User:
    """A person ``name`` (email ``name@example.com``) with ``perms`` as (app label, codename) pairs."""
    from django.contrib.auth.models import Permission
    from django.contrib.auth.models import User as UserModel

    user = UserModel.objects.create_user(name, f"{name}@example.com", password, is_staff=staff, is_superuser=superuser)
    for app, codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    return UserModel.objects.get(pk=user.pk)  # drop the permission cache


@dataclass
class People:
    owner: User  # owns the agent; holds the permission but may not approve its requests
    approver: User
    second: User
    outsider: User  # staff, no permission


@pytest.fixture
def agent_owner(db: None) -> User:
    return make_user("olivia", password="pw-olivia", perms=APPROVE)


@pytest.fixture
def approver(db: None) -> User:
    return make_user("alice", password="pw-alice", perms=APPROVE)


@pytest.fixture
def second_approver(db: None) -> User:
    return make_user("bob", password="pw-bob", perms=APPROVE)


@pytest.fixture
def staff_outsider(db: None) -> User:
    return make_user("mallory", password="pw-mallory")


@pytest.fixture
def people(agent_owner: User, approver: User, second_approver: User, staff_outsider: User) -> People:
    return People(owner=agent_owner, approver=approver, second=second_approver, outsider=staff_outsider)


@pytest.fixture
def fixer(people: People) -> Agent:
    from rewind.models import Agent

    return Agent.objects.create(name="fixer", owner=people.owner)


@pytest.fixture
def agent(fixer: Agent) -> Agent:
    """The agent a test acts as when any agent will do: the shared ``fixer``."""
    return fixer


@pytest.fixture
def tagged(sim: SimHandle, sites: dict[str, Site]) -> Callable[..., ChangeGuard]:
    from tests.helpers import insert_tagged_checkpoint

    def make(vm: str = "web01", change_id: str = "chg-1", agent_name: str = "fixer") -> ChangeGuard:
        return insert_tagged_checkpoint(sim, sites, vm, change_id, agent_name)

    return make


@pytest.fixture
def fresh_lookups(settings: Any) -> None:
    """Tests that change what the simulator lists see it at the next look-up, never a cached answer."""
    from rewind.protection import protection_cache_clear

    settings.REWIND_LOOKUP_CACHE_S = 0
    protection_cache_clear()


@pytest.fixture
def outsider(db: None) -> User:
    """Signed in, not staff, no permission."""
    return make_user("mallory", password="pw-mallory-123", staff=False)


@pytest.fixture
def staff_no_perms(db: None) -> User:
    return make_user("sam", password="pw-sam-123")


@pytest.fixture
def viewer(db: None) -> User:
    """Staff with every view permission of the API and nothing else."""
    return make_user("vera", password="pw-vera-123", perms=VIEW_PERMS)


@pytest.fixture
def superuser(db: None) -> User:
    return make_user("root", password="pw-root-123", superuser=True)


@pytest.fixture
def receiver() -> Iterator[Any]:
    """A webhook receiver on 127.0.0.1 for notification channels (tests.receiver)."""
    from tests.receiver import running_receiver

    with running_receiver() as r:
        yield r


@pytest.fixture
def eager() -> Iterator[None]:
    """Tasks queued on commit run right here: for tests where the queue is not what they are about."""
    from rewind.celery import app

    app.loader.import_default_modules()  # every task registered: one not registered here would go to the broker
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None],
    timeout: float = 30.0,
    *,
    what: str | Callable[[], str] = "",
    every: float = 0.05,
) -> T:
    """``probe()`` once it is truthy: for what another process does (a worker, a server, the
    simulator). ``timeout`` bounds a hang; it is not a speed check. ``what`` may be a function,
    to say what was seen when the wait ran out. Tasks of the test's own process run through
    ``InlineTasks.wait_for`` instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"{said or 'the condition'} not met in {timeout} s")
        time.sleep(every)


@dataclass(order=True)
class _Message:
    due: float  # time.monotonic() at which it may run
    seq: int  # ties run in the order they were sent
    name: str = field(compare=False)
    args: Sequence[Any] = field(compare=False)
    kwargs: Mapping[str, Any] = field(compare=False)


class InlineTasks:
    """Celery messages sent by this process, run in this process at their own time.

    ``send_task`` keeps each message (every way of queueing ends there: ``send_task``,
    ``signature(...).delay()``, ``apply_async``) with the moment its countdown or eta allows;
    ``run_due`` runs the due ones, oldest first, with the registered task's own function
    (``Task.apply``, which raises what the task raised). Thread-safe: MCP worker threads and a
    guard's VPG threads may queue too.
    """

    def __init__(self, app: Any) -> None:
        self._app = app
        self._queue: list[_Message] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self.ran: list[str] = []  # task names in the order they ran

    def send_task(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        countdown: float | None = None,
        eta: datetime | None = None,
        **_options: Any,
    ) -> Any:
        delay = float(countdown or 0.0)
        if eta is not None:
            delay = max(delay, (eta - datetime.now(eta.tzinfo)).total_seconds())
        message = _Message(time.monotonic() + max(0.0, delay), next(self._seq), name, tuple(args or ()), kwargs or {})
        with self._lock:
            heapq.heappush(self._queue, message)
        return self._app.AsyncResult(uuid.uuid4().hex)

    def pending(self) -> list[str]:
        with self._lock:
            return [m.name for m in sorted(self._queue)]

    def lose(self, name: str) -> int:
        """Drop every queued message of task ``name``, as a broker that lost them would; how many."""
        with self._lock:
            kept = [m for m in self._queue if m.name != name]
            lost = len(self._queue) - len(kept)
            self._queue = kept
            heapq.heapify(self._queue)
        return lost

    def run_due(self) -> int:
        """Run every message whose time has come (including those the runs queue for now); how many ran."""
        ran = 0
        while True:
            with self._lock:
                if not self._queue or self._queue[0].due > time.monotonic():
                    return ran
                message = heapq.heappop(self._queue)
            self._app.tasks[message.name].apply(args=message.args, kwargs=message.kwargs, throw=True)
            self.ran.append(message.name)
            ran += 1

    def wait_for(self, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
        """Run due messages until ``probe()`` is truthy; return it. A bound on a hang, not a speed check.

        Between checks it waits for the next message's time, at most 0.1 s: what the tests wait
        for (a checkpoint the simulator lists after its delay, a mount it finishes) is on the
        simulator's side too.
        """
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"condition not met in {timeout} s; queued here: {self.pending()}")
            if self.run_due():
                continue
            with self._lock:
                next_due = self._queue[0].due if self._queue else None
            pause = 0.1 if next_due is None else min(0.1, next_due - time.monotonic())
            time.sleep(max(0.005, pause))


@pytest.fixture
def inline_tasks(transactional_db: None, monkeypatch: pytest.MonkeyPatch) -> InlineTasks:
    """Queued tasks run in this process (``InlineTasks``); the test's data is committed, as a worker's would be."""
    from rewind.celery import app

    app.loader.import_default_modules()  # every task registered, so each message has its function
    tasks = InlineTasks(app)
    monkeypatch.setattr(app, "send_task", tasks.send_task)
    return tasks


@pytest.fixture
def api() -> Callable[[User | None], Any]:
    """``api(user)``: a signed-in browser on the REST API, CSRF and all (``tests.helpers.Api``)."""
    from tests.helpers import Api

    return Api


# --- the audit log's database guards --------------------------------------------------------------
# The audit tables refuse DELETE and TRUNCATE, and check every row that goes into the chain
# (rewind/migrations/0002, 0024, 0025, 0029), so a transactional test's flush, or a test that
# tampers with the chain as someone with database rights could, lifts them for its own
# statements only: on PostgreSQL by running as a replica for one transaction (its ordinary
# triggers do not fire; the test role is a superuser), on SQLite by dropping the triggers of the
# two tables and creating them again, as the database holds them, in the same transaction.
_AUDIT_TABLES = ("rewind_auditevent", "rewind_auditchainhead")


def audit_guard_statements(connection: Any) -> tuple[list[str], list[str]]:
    """(statements that lift the audit tables' guards, statements that put them back), for one transaction."""
    if connection.vendor == "postgresql":
        return ["SET LOCAL session_replication_role = replica"], []
    if connection.vendor != "sqlite":
        return [], []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN (%s, %s) ORDER BY name",
            list(_AUDIT_TABLES),
        )
        triggers = cursor.fetchall()
    return [f"DROP TRIGGER IF EXISTS {name}" for name, _sql in triggers], [sql for _name, sql in triggers]


def audit_guards_lifted_run(statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """Run ``statements`` on the audit tables past their guards, in one transaction."""
    from django.db import connection, transaction

    lift, restore = audit_guard_statements(connection)
    with transaction.atomic(), connection.cursor() as cursor:
        for sql in lift:
            cursor.execute(sql)
        for sql, params in statements:
            cursor.execute(sql, params)
        for sql in restore:
            cursor.execute(sql)


@pytest.fixture(scope="session", autouse=True)
def _flush_past_the_audit_guards() -> Iterator[None]:
    """A transactional test's flush empties the audit tables too, past the guards that refuse it."""
    from django.db import connection
    from django.db.backends.base.operations import BaseDatabaseOperations

    operations = type(connection.ops)  # the backend's class: every connection of it flushes through it
    originals = {operations: operations.sql_flush}

    def wrapped(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
        def sql_flush(self: BaseDatabaseOperations, style: Any, tables: Sequence[str], **kwargs: Any) -> list[str]:
            statements = original(self, style, tables, **kwargs)
            if not {"rewind_auditevent", "rewind_auditchainhead"} & set(tables):
                return statements
            lift, restore = audit_guard_statements(self.connection)
            return [*lift, *statements, *restore]

        return sql_flush

    for cls, original in originals.items():
        cls.sql_flush = wrapped(original)  # type: ignore[method-assign]
    yield
    for cls, original in originals.items():
        cls.sql_flush = original  # type: ignore[method-assign]
