"""Errors a user can act on. Their text is shown as is: plain words, no secrets."""

from __future__ import annotations

from collections.abc import Callable


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


def field_checked[T](check: Callable[[T], T], value: T, field_error: Callable[[str], Exception]) -> T:
    """A service's own check of one field, its refusal raised as ``field_error`` (a form's or a
    serializer's ValidationError) so the admin and the API show it under the field it is about."""
    try:
        return check(value)
    except ApplicationError as exc:
        raise field_error(exc.message) from None
