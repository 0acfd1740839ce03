"""The starter catalog: the usual ways an agent changes a Linux or Windows guest.

vm_arg choices (what those MCP servers commonly call the target):
- ``ssh/exec``: ``host`` (user@host and host:port are accepted by the guard);
- ``ansible/run_playbook``: ``hosts`` (one host; a pattern or a list must be guarded host by host);
- ``winrm/run_command``, ``winrm/run_ps``: ``host``;
- ``powershell/invoke_command``: ``computer_name`` (PowerShell's -ComputerName);
- ``smb/write_file``: ``host`` (the SMB server, i.e. the Windows guest).
Installed as added by "starter list" (kind system); a person may change or disable them.
"""

from __future__ import annotations

from django.db import migrations

STARTER = [
    ("ssh/exec", "host", "linux", "Runs a shell command on a Linux guest over SSH."),
    ("ansible/run_playbook", "hosts", "linux", "Runs an Ansible playbook against a Linux guest."),
    ("winrm/run_command", "host", "windows", "Runs a command on a Windows guest over WinRM."),
    ("winrm/run_ps", "host", "windows", "Runs a PowerShell script on a Windows guest over WinRM."),
    ("powershell/invoke_command", "computer_name", "windows", "Invoke-Command against a Windows guest."),
    ("smb/write_file", "host", "windows", "Writes a file on a Windows guest's SMB share."),
]


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    MutatingTool = apps.get_model("catalog", "MutatingTool")
    for pattern, vm_arg, platform, description in STARTER:
        MutatingTool.objects.get_or_create(
            pattern=pattern,
            defaults={
                "vm_arg": vm_arg,
                "platform": platform,
                "description": description,
                "added_by": "starter list",
                "added_by_kind": "system",
            },
        )


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    MutatingTool = apps.get_model("catalog", "MutatingTool")
    MutatingTool.objects.filter(pattern__in=[p for p, *_ in STARTER], added_by="starter list").delete()


class Migration(migrations.Migration):
    dependencies = [("catalog", "0001_initial")]
    operations = [migrations.RunPython(install, uninstall)]
