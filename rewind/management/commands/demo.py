"""``manage.py demo``: the loop the product exists for, against the simulator, end to end.

A scripted agent guards a VM over MCP before an ssh edit, makes a bad edit in the simulated guest and asks for
the file back; a person approves in the browser (or ``--auto-approve`` does, through the service the admin's
button calls). The agent's token is issued for this run and revoked at its end, so the command must use the
stack's database, which it checks.
"""

from __future__ import annotations

import base64
import difflib
import time
from collections.abc import Callable
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.text import Truncator

from recoveries.services import recovery_request_approve
from rewind.agents import agent_token_issue_by_name, agent_token_revoke
from rewind.approvals.models import HeldCall
from rewind.audit import Actor
from rewind.audit.selectors import audit_event_trail
from rewind.lib.errors import ApplicationError
from rewind.management.commands._demo_agent import AgentCallError, ScriptedAgent
from rewind.management.commands._demo_approval import (
    approve_and_forward,
    call_row,
    changed_call_refused,
    entry_approve,
    stop_refuses_the_next_call,
)
from rewind.management.commands._demo_folder import fetch_checked, manifest_lines
from rewind.management.commands._demo_gateway import (
    EXEC,
    diff_lines,
    ensure_guest_shell,
    guard_lines,
    sed_command,
    write_back_confirm,
)
from rewind.mcp.endpoint import public_base_url
from rewind.sites.models import Site
from zvmsim.control_client import control_session

DEMO_AGENT = "demo-agent"
DEMO_APPROVER = "approver"  # created by demo_setup (make run); not the agent's owner, so it may approve
ACTOR = Actor.system("manage.py demo")
FINISHED = ("succeeded", "failed", "denied", "expired")
POLL_S = 1.0


def _default_url() -> str:
    return public_base_url()


def _default_sim_url() -> str:
    return f"https://127.0.0.1:{settings.REWIND_SIM_PORT}"


def _diff_shown(out: dict[str, Any]) -> bool:
    """A restore in place whose diff the page shows now (or that is over)."""
    return (out.get("restore") or {}).get("state") not in (None, "requested", "comparing")


def bad_edit(text: str) -> str:
    """The agent's mistake: raise nginx's connection limit and forget the semicolon (any other file
    gets a line that does not belong in it)."""
    if "worker_connections 768;" in text:
        return text.replace("worker_connections 768;", "worker_connections 4096")
    return text + "include /etc/nginx/conf.d/*.conf\n"


class Command(BaseCommand):
    help = (
        "Run the demo loop against a running stack (make run): guard a VM over MCP, break a file in the "
        "simulated guest, ask for it back, wait for a person to approve (or --auto-approve), then print the "
        "recovered bytes, the diff, the unmount report and the audit trail."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--url",
            default=_default_url(),
            help="the service (default: REWIND_PUBLIC_URL, else the running make run, else port REWIND_PORT)",
        )
        parser.add_argument(
            "--sim-url", default=_default_sim_url(), help="the ZVM simulator (default: port REWIND_SIM_PORT)"
        )
        parser.add_argument("--vm", default="web01", help="the VM the agent changes (default web01)")
        parser.add_argument("--path", default="/etc/nginx/nginx.conf", help="the guest file it breaks")
        parser.add_argument(
            "--auto-approve",
            action="store_true",
            help=f"approve as the demo approver ({DEMO_APPROVER}) instead of waiting for a person (for CI)",
        )
        parser.add_argument(
            "--gateway",
            action="store_true",
            help="the agent connects only to /mcp and calls the guest shell's exec through the gateway, which "
            "guards the VM on the way; the agent never calls a zerto tool before its change",
        )
        parser.add_argument(
            "--approval",
            action="store_true",
            help="the gateway holds the guest shell's exec for a person after its checkpoint: approved, exactly "
            "that call runs once; the same call with one argument changed is refused; a stop refuses the next call",
        )
        parser.add_argument(
            "--folder",
            nargs="?",
            const="/var/www/html",
            default=None,
            help="bring back a whole folder instead (recursive): the agent breaks files in it and asks for the "
            "folder, then prints its manifest and checks the zip against it (default folder /var/www/html)",
        )
        parser.add_argument(
            "--timeout-s", type=float, default=3600.0, help="give up waiting for the recovery after this long"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"].rstrip("/")
        sim_url = options["sim_url"].rstrip("/")
        self.sim = _Sim(sim_url)
        self._check_running(url, sim_url)
        vm, path = options["vm"], options["path"]
        issued = agent_token_issue_by_name(actor=ACTOR, name=DEMO_AGENT, label="manage.py demo")
        self.agent = ScriptedAgent(f"{url}/mcp", issued.issued.token)
        self.stdout.write(f"Agent {issued.agent.name} connects to {url}/mcp with a token issued for this run.\n")
        try:
            if options["folder"]:
                self._run_folder(vm, options["folder"].rstrip("/") or "/", options, url)
            elif options["approval"]:
                self._run_approval(vm, path, options, sim_url, issued.agent.name)
            elif options["gateway"]:
                self._run_gateway(vm, path, options, sim_url)
            else:
                self._run(vm, path, options)
        except AgentCallError as exc:
            raise CommandError(str(exc)) from None
        finally:
            agent_token_revoke(actor=ACTOR, token=issued.issued.row)

    # --- the loop ----------------------------------------------------------------------------
    def _run(self, vm: str, path: str, options: dict[str, Any]) -> None:
        change_id = f"demo-{timezone.now():%Y%m%dT%H%M%S}"
        guard = self._guard(vm, path, change_id)
        good = self.sim.read(vm, path)
        bad = bad_edit(good)
        self._step(2, f"The agent edits {vm}:{path} over ssh, and gets it wrong")
        self.sim.write(vm, path, bad)
        self._show_diff(good, bad, f"{path} before the edit", f"{path} after the edit")
        asked = self.agent.call(
            "zerto_recover_file",
            {"vm": vm, "path": path, "reason": f"my edit broke {path}; I need it as it was", "change_id": change_id},
        )
        self._step(3, f"The agent asks for the file back: recovery #{asked['id']} is {asked['status']}")
        self.stdout.write(f"   Approve it here: {asked['approval_url']}\n")
        done = self._await(asked, options)
        recovered = self._report(done, bad, vm, path)
        self._trail(guard["id"], done["id"])
        if recovered is not None:
            self.sim.write(vm, path, recovered)
            self._step(6, f"The agent puts the recovered file back on {vm}")

    def _run_gateway(self, vm: str, path: str, options: dict[str, Any], sim_url: str) -> None:
        _upstream, said = ensure_guest_shell(sim_url)
        self.stdout.write("Gateway: " + "; ".join(said))
        good = self.sim.read(vm, path)
        self._step(1, f"The agent runs {EXEC} on {vm} through /mcp, without asking any zerto tool first")
        done_call = self.agent.call_result(
            EXEC, {"host": vm, "command": sed_command(path)}, on_message=lambda m: self.stdout.write(f"   … {m}")
        )
        meta = dict(done_call.meta or {})
        self.stdout.write("\n".join(guard_lines(meta)))
        guard = meta.get("zerto-rewind/guard") or {}
        if not guard.get("ok"):
            raise CommandError(f"the call was not guarded: {meta}")
        bad = self.sim.read(vm, path)
        self._step(2, "The edit went through, and it is wrong")
        self._show_diff(good, bad, f"{path} before the call", f"{path} after the call")
        asked = self.agent.call(
            "zerto_recover_file",
            {
                "vm": vm,
                "path": path,
                "reason": f"{EXEC} broke {path}",
                "change_id": guard["change_id"],
                "restore": True,
            },
        )
        self._step(
            3,
            f"The agent asks for the file back in place (restore: true) with that change id: recovery "
            f"#{asked['id']} is {asked['status']}",
        )
        self.stdout.write(f"   Approve it here, read the diff, then click Write back: {asked['approval_url']}\n")
        done = self._await(asked, options)
        self._report(done, bad, vm, path)
        self._trail(guard["id"], done["id"])
        self._restored(done, vm, path, good)

    def _run_approval(self, vm: str, path: str, options: dict[str, Any], sim_url: str, agent_name: str) -> None:
        _upstream, said = ensure_guest_shell(sim_url)
        approver = self._approver()
        said.append(entry_approve(approver))
        self.stdout.write("Gateway: " + "; ".join(said))
        good = self.sim.read(vm, path)
        arguments = {"host": vm, "command": sed_command(path)}
        self._step(1, f"The agent runs {EXEC} on {vm} through /mcp: guarded, then held for a person")
        if not options["auto_approve"]:
            self.stdout.write(f"   Approve it on its page (the agent's call prints it) as {DEMO_APPROVER}.")
        held, result = approve_and_forward(
            self.agent,
            agent_name,
            arguments,
            approver,
            options["auto_approve"],
            self.stdout.write,
            options["timeout_s"],
        )
        if result.is_error or held.state != HeldCall.State.FORWARDED:
            raise CommandError(f"held call #{held.pk} ended {held.state}: {held.refusal or 'no answer'}")
        row = call_row(held)
        self._step(
            2, f"Approved by {held.decided_by}, forwarded once: call {row.call_id} {row.decision}, {row.outcome}"
        )
        self._show_diff(good, self.sim.read(vm, path), f"{path} before the call", f"{path} after the call")
        changed = changed_call_refused(self.agent, {**arguments, "command": f"rm {path}"}, approver)
        self._step(
            3, f"The same call with one argument changed is held call #{changed.pk}, a new request: {changed.state}"
        )
        self.stdout.write(f"   {changed.refusal}; {path} is still there: {bool(self.sim.read(vm, path))}")
        refused = stop_refuses_the_next_call(self.agent, arguments, approver)
        self._step(4, "A person stops every guarded change: the agent's next call is refused")
        self.stdout.write(f"   {refused[:300]}")
        self.stdout.write("   The stop is lifted again.")

    def _write_back(self, recovery_id: int, timeout_s: float) -> None:
        """--auto-approve of a restore in place: once the diff is there, print it and click Write back."""
        out = self._poll(recovery_id, "approved", timeout_s, until=_diff_shown)
        if not _diff_shown(out) or out["status"] in FINISHED:
            return
        self.stdout.write(
            self.style.MIGRATE_HEADING("\n   The approval page shows the file in the guest beside the checkpoint's")
        )
        self.stdout.write("\n".join(diff_lines(recovery_id)))
        write_back_confirm(recovery_id, self._approver())
        self.stdout.write(f"   {DEMO_APPROVER} clicks Write back (--auto-approve): a guard first, then the write")

    def _run_folder(self, vm: str, folder: str, options: dict[str, Any], url: str) -> None:
        change_id = f"demo-{timezone.now():%Y%m%dT%H%M%S}"
        guard = self._guard(vm, folder, change_id)
        self._step(2, f"The agent deploys over {vm}:{folder} and breaks it: one file edited, one deleted")
        edited, deleted = f"{folder}/index.html", f"{folder}/css/site.css"
        good = self.sim.read(vm, edited)
        self.sim.write(vm, edited, bad_edit(good))
        self.sim.delete(vm, deleted)
        self.stdout.write(f"   edited {edited}, deleted {deleted}")
        asked = self.agent.call(
            "zerto_recover_file",
            {
                "vm": vm,
                "path": folder,
                "recursive": True,
                "reason": f"my deployment broke {folder}; I need the folder as it was",
                "change_id": change_id,
            },
        )
        self._step(3, f"The agent asks for the folder back: recovery #{asked['id']} is {asked['status']}")
        self.stdout.write(f"   Approve it here: {asked['approval_url']}\n")
        done = self._await(asked, options)
        result = done.get("result") or {}
        self._step(5, f"Recovery #{done['id']} {done['status']}")
        if done["status"] != "succeeded":
            raise CommandError(f"recovery #{done['id']} {done['status']}: {done.get('error') or result.get('error')}")
        self.stdout.write("Manifest:\n" + "\n".join(manifest_lines(result["folder"])))
        try:
            files = fetch_checked(url, result, self.agent.token)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"\nThe zip ({result['size']} bytes, sha256 {result['sha256']}): every file matches its sha256"
        )
        unmount = result.get("unmount") or {}
        self.stdout.write(
            f"Unmount: {'done' if unmount.get('ok') else 'NOT confirmed'} (FLR session {unmount.get('session_id')})"
        )
        self._trail(guard["id"], done["id"])
        for rel in (edited, deleted):
            self.sim.write(vm, rel, files[rel[len(folder) + 1 :]].decode())
        self._step(6, f"The agent puts {edited} and {deleted} back on {vm} from the zip")

    def _guard(self, vm: str, path: str, change_id: str) -> dict[str, Any]:
        self._step(1, f"The agent guards {vm} before running ssh/exec on it (change {change_id})")
        guard = self.agent.call(
            "zerto_guard_before_mutate",
            {
                "tool": "ssh/exec",
                "arguments": {"host": vm, "command": f"sed -i 's/768;/4096/' {path}"},
                "action": f"edit {path.rsplit('/', 1)[-1]}",
                "change_id": change_id,
            },
            on_message=lambda message: self.stdout.write(f"   … {message}"),
        )
        if not guard.get("ok"):
            raise CommandError(f"the guard says not to proceed: {guard.get('must_not_proceed')}")
        self.stdout.write(f"   ok: tag {guard['tag']!r}")
        for vpg in guard["vpgs"]:
            self.stdout.write(
                f"   {vpg['name']}: checkpoint {vpg['checkpoint_identifier']} at {vpg['checkpoint_timestamp']}"
            )
        return guard

    def _await(self, asked: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        recovery_id = asked["id"]
        if options["auto_approve"]:
            self._approve(recovery_id)
            if asked.get("restore"):
                self._write_back(recovery_id, options["timeout_s"])
        else:
            self.stdout.write(
                f"   Waiting for a person: log in as {DEMO_APPROVER} (make run printed the password; it is in "
                f"{settings.VAR_DIR / ('demo-' + DEMO_APPROVER + '-password')}) and click Approve. Ctrl-C stops waiting."
            )
        try:
            return self._poll(recovery_id, asked["status"], options["timeout_s"])
        except KeyboardInterrupt:
            raise CommandError(
                f"stopped waiting: recovery #{recovery_id} stays as it is until someone decides or it expires "
                f"({asked['expires_at']}), and the guest keeps the bad file"
            ) from None

    def _poll(
        self, recovery_id: int, said: str, timeout_s: float, until: Callable[[dict[str, Any]], bool] | None = None
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.agent.call("zerto_recovery_status", {"id": recovery_id})
            if out["status"] != said:
                said = out["status"]
                self.stdout.write(f"   recovery #{recovery_id}: {said}")
            if out["status"] in FINISHED or (until is not None and until(out)):
                return dict(out)
            if time.monotonic() > deadline:
                raise CommandError(f"recovery #{recovery_id} is still {out['status']} after {timeout_s:g} s")
            time.sleep(POLL_S)

    def _approver(self) -> Any:
        approver = get_user_model().objects.filter(username=DEMO_APPROVER).first()
        if approver is None:
            raise CommandError(
                f"there is no user {DEMO_APPROVER!r} to approve as: make run creates the demo people "
                "(or run manage.py demo_setup --sim-url ...)"
            )
        return approver

    def _approve(self, recovery_id: int) -> None:
        approver = self._approver()
        try:
            recovery_request_approve(recovery_id=recovery_id, user=approver)
        except ApplicationError as exc:
            raise CommandError(f"{DEMO_APPROVER} could not approve: {exc.message}") from None
        self._step(4, f"{DEMO_APPROVER} approves recovery #{recovery_id} (--auto-approve)")

    def _report(self, done: dict[str, Any], bad: str, vm: str, path: str) -> str | None:
        result = done.get("result") or {}
        self._step(5, f"Recovery #{done['id']} {done['status']}")
        if done["status"] != "succeeded":
            raise CommandError(f"recovery #{done['id']} {done['status']}: {done.get('error') or result.get('error')}")
        content = result.get("content")
        if content is None:
            raise CommandError(f"the recovered file came back as a link, not inline: {result.get('url')}")
        recovered = content if result.get("encoding") == "utf-8" else base64.b64decode(content).decode()
        self.stdout.write(f"   {result['size']} bytes, sha256 {result['sha256']}\n")
        self.stdout.write("--- recovered bytes " + "-" * 50)
        self.stdout.write(recovered.rstrip("\n"))
        self.stdout.write("-" * 70 + "\n")
        self._show_diff(bad, recovered, f"{vm}:{path} as the agent left it", f"{vm}:{path} recovered")
        unmount = result.get("unmount") or {}
        state = "done" if unmount.get("ok") else "NOT confirmed"
        self.stdout.write(f"Unmount: {state} (FLR session {unmount.get('session_id')})")
        if unmount.get("warning"):
            self.stdout.write(f"   warning: {unmount['warning']}")
        return str(recovered)

    def _restored(self, done: dict[str, Any], vm: str, path: str, good: str) -> None:
        """What the service wrote back into the guest, and whether reading it back proved it."""
        restore = done.get("restore") or {}
        self._step(6, f"The service put the file back into {vm}:{path} itself")
        self.stdout.write(f"   guarded first: guard #{restore.get('guard_id')} (change {restore.get('change_id')})")
        self.stdout.write(f"   read back: sha256 {restore.get('read_back_sha256')}")
        self.stdout.write(f"   restored: {restore.get('restored')}")
        if restore.get("restored") != "verified":
            raise CommandError(f"the write-back was not verified: {restore.get('restored') or restore.get('state')}")
        in_guest = self.sim.read(vm, path)
        self.stdout.write(f"   {vm}:{path} now " + ("holds the good file again" if in_guest == good else "DIFFERS"))

    def _trail(self, guard_id: int, recovery_id: int) -> None:
        self.stdout.write("\nAudit trail of the change:")
        targets = [("rewind.changeguard", str(guard_id)), ("recoveries.recoveryrequest", str(recovery_id))]
        for e in audit_event_trail(targets=targets):
            when = timezone.localtime(e.time).strftime("%H:%M:%S")
            who = f"{e.actor_type}:{e.actor}"
            target = Truncator(e.target_repr).chars(60)
            position = f"#{e.seq}" if e.seq is not None else "#…"  # chained a moment after its commit
            self.stdout.write(f"  {position:<6} {when}  {who:<24} {e.action:<38} {target}".rstrip())

    # --- helpers ------------------------------------------------------------------------------
    def _step(self, number: int, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"\n{number}. {text}"))

    def _show_diff(self, before: str, after: str, before_name: str, after_name: str) -> None:
        diff = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), before_name, after_name
        )
        self.stdout.write("".join(diff).rstrip("\n") or "   (no difference)")

    def _check_running(self, url: str, sim_url: str) -> None:
        try:
            requests.get(f"{url}/health/", timeout=5).raise_for_status()
        except requests.RequestException:
            raise CommandError(
                f"the service does not answer at {url}: start it with `make run` in another terminal (or give --url)"
            ) from None
        try:
            self.sim.state()
        except requests.RequestException as exc:
            raise CommandError(
                f"the ZVM simulator does not answer at {sim_url} ({type(exc).__name__}): `make run` starts it "
                "(or give --sim-url)"
            ) from None
        sites = list(Site.objects.filter(enabled=True).values_list("name", "base_url"))
        if not any(base.startswith(sim_url + "/") for _, base in sites):
            where = ", ".join(f"{name} at {base}" for name, base in sites) or "no site at all"
            raise CommandError(
                f"this database has no site on the simulator at {sim_url} ({where}): run this command with the "
                "stack's settings (the same REWIND_VAR_DIR or DATABASE_URL as make run)"
            )


class _Sim:
    """The simulator's control API: the guest's files, as the agent's ssh would see them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = control_session()

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        resp = self.http.request(method, f"{self.url}{path}", timeout=30, **kwargs)
        if resp.status_code >= 400:
            raise CommandError(f"the simulator refused {method} {path}: {resp.status_code} {resp.text[:300]}")
        return resp

    def state(self) -> Any:
        return self._request("GET", "/_sim/state").json()

    def read(self, vm: str, path: str) -> str:
        return self._request("GET", f"/_sim/vms/{vm}/files", params={"path": path}).content.decode()

    def write(self, vm: str, path: str, text: str) -> None:
        self._request("PUT", f"/_sim/vms/{vm}/files", json={"path": path, "text": text})

    def delete(self, vm: str, path: str) -> None:
        self._request("DELETE", f"/_sim/vms/{vm}/files", json={"path": path})
