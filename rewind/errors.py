"""Errors a user can act on. Their text is shown as is: plain words, no secrets."""

from __future__ import annotations


class ApplicationError(Exception):
    """A request that cannot be carried out as asked; nothing was changed."""

    def __init__(self, message: str, *, extra: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}


class NotFoundError(ApplicationError):
    pass


class PermissionDeniedError(ApplicationError):
    pass
