from __future__ import annotations

from django.apps import AppConfig


class RewindConfig(AppConfig):
    name = "rewind"
    verbose_name = "Rewind"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rewind.notifications.logredact import install_log_redaction
        from rewind.sites.zvm_shared import shared_stores
        from rewind.zvm import use_shared_stores

        # Every process (web, worker, beat, commands) counts ZVM caps and shares tokens with the others.
        use_shared_stores(shared_stores)
        # Whatever log level is turned on, no notification URL's credentials reach a handler.
        install_log_redaction()
