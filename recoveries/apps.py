from __future__ import annotations

from django.apps import AppConfig


class RecoveriesConfig(AppConfig):
    name = "recoveries"
    verbose_name = "File recoveries"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from recoveries.approver_email import APPROVER_EMAIL
        from rewind.notifications.channels import builtin_channel_register

        # The approver e-mail is one notification channel among the configured ones: its
        # deliveries are recorded, deduplicated and listed with theirs.
        builtin_channel_register(APPROVER_EMAIL)
