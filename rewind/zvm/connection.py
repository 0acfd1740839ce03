"""How to reach one site's ZVM: address, credentials, TLS, timeouts, retry bounds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True)
class ZvmConnection:
    """Everything the client needs to talk to one ZVM. Immutable; safe to share.

    ``base_url`` may carry a path prefix (``https://proxy/site-a``). ``client_secret`` set: the
    client_credentials grant, else the password grant. ``ca_bundle`` pins the ZVM's certificate. GETs are tried
    ``get_attempts`` times in all on transient errors, backing off from ``backoff_initial`` to ``backoff_max``
    seconds with jitter. ``max_requests_per_s`` caps the requests to this ZVM (``pacing``; None: no cap),
    counted per ``zvm_key``.
    """

    site_name: str
    base_url: str
    username: str = ""
    password: str = field(default="", repr=False)
    client_id: str = "zerto-client"
    client_secret: str | None = field(default=None, repr=False)
    verify_tls: bool = False
    ca_bundle: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    get_attempts: int = 3
    backoff_initial: float = 0.2
    backoff_max: float = 1.0
    max_requests_per_s: float | None = None
    # Names this site in the circuit breaker (``breaker``); empty: the ZVM's address (``zvm_key``).
    circuit_key: str = ""

    def __repr__(self) -> str:
        # Spelled out (not just field(repr=False)) so a future field cannot leak by default.
        return (
            f"ZvmConnection(site_name={self.site_name!r}, base_url={self.display_url!r}, "
            f"username={self.username!r}, client_id={self.client_id!r}, "
            f"grant={self.grant_type!r}, verify={self.verify!r}, max_requests_per_s={self.max_requests_per_s!r})"
        )

    @property
    def grant_type(self) -> str:
        return "client_credentials" if self.client_secret else "password"

    @property
    def verify(self) -> bool | str:
        """The ``verify=`` value for requests: a pinned CA bundle path wins."""
        return self.ca_bundle if self.ca_bundle else self.verify_tls

    @property
    def root(self) -> str:
        """``base_url`` without a trailing slash; API paths are appended to it."""
        return self.base_url.rstrip("/")

    @property
    def display_url(self) -> str:
        """``base_url`` safe to show: any user:password@ part removed."""
        parts = urlsplit(self.root)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    @property
    def token_url(self) -> str:
        return f"{self.root}/auth/realms/zerto/protocol/openid-connect/token"

    @property
    def zvm_key(self) -> str:
        """Names this ZVM in shared counters: the same address counts as one ZVM, whoever logs in."""
        return hashlib.sha256(self._address.encode()).hexdigest()[:32]

    @property
    def circuit_id(self) -> str:
        return self.circuit_key or self.zvm_key

    @property
    def login_key(self) -> str:
        """Names this login in shared token stores: address, grant and account, never the secret."""
        who = "\n".join((self._address, self.grant_type, self.client_id, self.username))
        return hashlib.sha256(who.encode()).hexdigest()[:32]

    @property
    def _address(self) -> str:
        # Scheme and host name are case-insensitive; a path prefix (a proxy's site) is not.
        parts = urlsplit(self.display_url)
        return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, "", ""))
