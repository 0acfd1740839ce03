"""How a file is written into a guest and read from it through an upstream of the gateway (docs/restore.md, "Guest
file tools").

Per upstream and platform an operator names the writer and the reader tool and which arguments take the VM, the
path and the content, each tool its own (an upstream serving one machine takes no VM argument).
``content_encoding`` says how the bytes travel: ``utf-8`` text (no binary file through such a writer) or
``base64``. Changed only through ``recoveries.restore.guest_tools``.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class GuestFileTools(models.Model):
    class Os(models.TextChoices):
        LINUX = "linux"
        WINDOWS = "windows"

    class Encoding(models.TextChoices):
        UTF8 = "utf-8", "utf-8 text"
        BASE64 = "base64"

    # What an operator sets on a row (besides the upstream and platform that name it): the admin
    # form and the REST serializer show exactly these.
    EDITABLE = (
        "vm_pattern",
        "writer_tool",
        "reader_tool",
        "vm_arg",
        "path_arg",
        "content_arg",
        "reader_vm_arg",
        "reader_path_arg",
        "content_encoding",
        "encoding_arg",
        "enabled",
    )

    upstream = models.ForeignKey("rewind.Upstream", on_delete=models.CASCADE, related_name="guest_file_tools")
    os = models.CharField(max_length=10, choices=Os.choices)
    vm_pattern = models.CharField(
        max_length=255, default="*", help_text="The VMs it serves, by name: a shell pattern such as web* (* for all)."
    )
    writer_tool = models.CharField(max_length=200, help_text="The upstream's name for the tool that writes a file.")
    reader_tool = models.CharField(
        max_length=200, blank=True, help_text="The tool that reads a file: the diff and the verification need it."
    )
    vm_arg = models.CharField(
        max_length=100,
        default="host",
        blank=True,
        help_text="The writer's argument that takes the VM; empty for an upstream that serves one machine (its host VM).",
    )
    path_arg = models.CharField(max_length=100, default="path", help_text="The writer's argument that takes the path.")
    content_arg = models.CharField(max_length=100, default="content")
    reader_vm_arg = models.CharField(
        max_length=100, blank=True, help_text="The reader's argument that takes the VM, when not the writer's."
    )
    reader_path_arg = models.CharField(
        max_length=100, blank=True, help_text="The reader's argument that takes the path, when not the writer's."
    )
    content_encoding = models.CharField(max_length=10, choices=Encoding.choices, default=Encoding.UTF8)
    encoding_arg = models.CharField(
        max_length=100, blank=True, help_text="An argument of both tools that is given the encoding (utf-8 or base64)."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "recoveries"
        ordering = ["upstream__name", "os", "vm_pattern"]
        verbose_name = "guest file tools"
        verbose_name_plural = "guest file tools"
        constraints = [
            models.UniqueConstraint(fields=["upstream", "os", "vm_pattern"], name="guest_file_tools_unique"),
            models.CheckConstraint(condition=models.Q(os__in=["linux", "windows"]), name="guest_file_tools_os_valid"),
            models.CheckConstraint(
                condition=models.Q(content_encoding__in=["utf-8", "base64"]), name="guest_file_tools_encoding_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.upstream.name} {self.os} {self.vm_pattern}: {self.writer_tool}/{self.reader_tool or '-'}"

    @property
    def reader_vm(self) -> str:
        return self.reader_vm_arg or self.vm_arg

    @property
    def reader_path(self) -> str:
        return self.reader_path_arg or self.path_arg

    def audit_data(self) -> dict[str, Any]:
        return {"upstream": self.upstream.name, "os": self.os, **{name: getattr(self, name) for name in self.EDITABLE}}
