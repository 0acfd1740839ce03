"""Who did something: an agent, a person or the system. Every audit row names one.

It sits below the audit log so that the REST and admin building blocks can name a caller without importing
the log; the type strings are ``AuditEvent.ActorType``'s values.
"""

from __future__ import annotations

from dataclasses import dataclass

AGENT, USER, SYSTEM_TYPE = "agent", "user", "system"


@dataclass(frozen=True)
class Actor:
    type: str
    name: str

    @classmethod
    def agent(cls, name: str) -> Actor:
        return cls(AGENT, name)

    @classmethod
    def user(cls, name: str) -> Actor:
        return cls(USER, name)

    @classmethod
    def system(cls, name: str = "system") -> Actor:
        return cls(SYSTEM_TYPE, name)


SYSTEM = Actor.system()
