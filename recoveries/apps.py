from __future__ import annotations

from django.apps import AppConfig


class RecoveriesConfig(AppConfig):
    name = "recoveries"
    verbose_name = "File recoveries"
    default_auto_field = "django.db.models.BigAutoField"
