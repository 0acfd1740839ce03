"""Per-host upstreams (a server that serves one machine) and the guest file tools' own argument mappings."""

from __future__ import annotations

import re
from typing import Any

import pytest

from catalog.services import mutating_tool_add
from recoveries.restore.guest_tools import guest_file_tools_set
from recoveries.restore.guestfile import GuestFiles
from rewind.audit import Actor
from rewind.gateway.models import UpstreamTool
from rewind.gateway.policy import GUARD, PASS, plan_call
from rewind.gateway.services import ListedTool, upstream_create, upstream_tools_record, upstream_update
from rewind.lib.errors import ApplicationError

ADMIN = Actor.user("admin")


def _listed(name: str, *args: str, read_only: bool = False) -> ListedTool:
    schema = {"type": "object", "properties": {a: {"type": "string"} for a in args}}
    return ListedTool(name, "", "", schema, None, {"readOnlyHint": True} if read_only else None, None)


def _host_upstream(host: str = "web01") -> Any:
    up = upstream_create(actor=ADMIN, name="shell", url="http://127.0.0.1:1/mcp", host_vm=host)
    upstream_tools_record(
        upstream=up,
        listed=[_listed("exec", "command", "host"), _listed("cat", "path", read_only=True)],
        reserved=set(),
    )
    return up


def _tool(name: str) -> UpstreamTool:
    return UpstreamTool.objects.select_related("upstream").get(name=name)


@pytest.mark.django_db
def test_a_per_host_upstreams_tools_are_guarded_on_its_vm_whatever_their_arguments_say(sites: Any) -> None:
    _host_upstream()
    plan = plan_call(_tool("exec"), {"command": "rm -rf /srv", "host": "db01"})  # db01 is another protected VM
    assert (plan.action, plan.vm, plan.vm_arg) == (GUARD, "web01", "")
    assert "upstream shell acts on VM web01" in plan.reason
    assert plan_call(_tool("cat"), {"path": "/etc/hostname"}).action == PASS  # annotated read-only


@pytest.mark.django_db
def test_a_catalog_entry_of_a_per_host_upstream_needs_no_vm_argument(sites: Any) -> None:
    _host_upstream()
    mutating_tool_add(actor=ADMIN, pattern="shell/exec", vm_arg="host", description="the host's shell")
    plan = plan_call(_tool("exec"), {"command": "reboot"})  # no host argument at all
    assert (plan.action, plan.vm, plan.catalog_entry) == (GUARD, "web01", "shell/exec")


@pytest.mark.django_db
def test_a_host_vm_no_zvm_knows_refuses_the_call_rather_than_pass_it(sites: Any) -> None:
    _host_upstream("nowhere01")
    with pytest.raises(ApplicationError, match="which no ZVM knows"):
        plan_call(_tool("exec"), {"command": "reboot"})


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"host_vm": "web 01"}, "host_vm must be one VM"),
        ({"host_vm": "web\x0701"}, "host_vm must be one VM"),
    ],
)
def test_bad_per_host_settings_are_refused_and_change_nothing(fields: dict[str, Any], said: str) -> None:
    up = upstream_create(actor=ADMIN, name="shell", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ApplicationError, match=said):
        upstream_update(actor=ADMIN, upstream=up, **fields)
    up.refresh_from_db()
    assert up.host_vm == ""


@pytest.mark.django_db
def test_the_writer_and_the_reader_each_take_their_own_arguments() -> None:
    """write_file(computer_name, …) beside read_file(host, …): one shared vm_arg fitted neither."""
    up = upstream_create(actor=ADMIN, name="win", url="http://127.0.0.1:1/mcp")
    upstream_tools_record(
        upstream=up,
        listed=[_listed("write_file", "computer_name", "file", "body"), _listed("read_file", "host", "path")],
        reserved=set(),
    )
    common = {"writer_tool": "write_file", "reader_tool": "read_file", "path_arg": "file", "content_arg": "body"}
    with pytest.raises(ApplicationError, match="the reader win/read_file takes no argument computer_name, file"):
        guest_file_tools_set(actor=ADMIN, upstream=up, os="windows", vm_arg="computer_name", **common)
    row = guest_file_tools_set(
        actor=ADMIN,
        upstream=up,
        os="windows",
        vm_arg="computer_name",
        reader_vm_arg="host",
        reader_path_arg="path",
        **common,
    )
    files = GuestFiles(link=None, tools=row)  # type: ignore[arg-type]
    assert files._arguments("app01", r"C:\app\web.config") == {"computer_name": "app01", "file": r"C:\app\web.config"}
    assert files._arguments("app01", r"C:\app\web.config", reader=True) == {
        "host": "app01",
        "path": r"C:\app\web.config",
    }


@pytest.mark.django_db
def test_a_per_host_upstreams_file_tools_take_no_vm_argument_and_serve_only_its_vm() -> None:
    up = upstream_create(actor=ADMIN, name="shell", url="http://127.0.0.1:1/mcp", host_vm="web01")
    upstream_tools_record(
        upstream=up, listed=[_listed("write", "path", "content"), _listed("read", "path")], reserved=set()
    )
    with pytest.raises(ApplicationError, match="its tools take no VM argument"):
        guest_file_tools_set(actor=ADMIN, upstream=up, os="linux", writer_tool="write", vm_arg="host")
    with pytest.raises(ApplicationError, match=re.escape("serves only web01, which vm_pattern 'db*' leaves out")):
        guest_file_tools_set(actor=ADMIN, upstream=up, os="linux", writer_tool="write", vm_arg="", vm_pattern="db*")
    row = guest_file_tools_set(actor=ADMIN, upstream=up, os="linux", writer_tool="write", reader_tool="read", vm_arg="")
    assert row.vm_pattern == "web01"
    files = GuestFiles(link=None, tools=row)  # type: ignore[arg-type]
    assert files._arguments("web01", "/etc/motd") == {"path": "/etc/motd"}
