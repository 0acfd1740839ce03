from __future__ import annotations

from django.apps import AppConfig


class RewindConfig(AppConfig):
    name = "rewind"
    verbose_name = "Rewind"
    default_auto_field = "django.db.models.BigAutoField"
