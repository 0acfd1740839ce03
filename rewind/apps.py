from __future__ import annotations

from django.apps import AppConfig


class RewindConfig(AppConfig):
    name = "rewind"
    verbose_name = "Rewind"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        from rewind import checks  # noqa: F401  (registers the deployment checks)
        from rewind.notifications.logredact import install_log_redaction
        from rewind.signin import record_lockout
        from rewind.sites.zvm_shared import shared_stores
        from rewind.zvm import use_shared_stores

        # Every process (web, worker, beat, commands) counts ZVM caps and shares tokens with the others.
        use_shared_stores(shared_stores)
        # Whatever log level is turned on, no notification URL's credentials reach a handler.
        install_log_redaction()
        # django-axes tells of a lock-out by this signal only; the audit log must hear of it.
        user_locked_out.connect(record_lockout, dispatch_uid="rewind.signin.record_lockout")
