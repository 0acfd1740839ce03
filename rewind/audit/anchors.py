"""Anchors: the chain's head published outside the database, signed, so a cut or rewritten chain shows
(docs/audit-integrity.md).

The chain proves nothing changed relative to the rows that remain; someone who may rewrite the database can cut
its tail or empty it and leave a chain that verifies. So its head is signed with a key not in the database and
appended to a file (and syslog) the database cannot rewrite, and the head row records the newest anchored event
so a file cut back shows too. A chain that no longer matches its last anchor is never anchored again: a new
anchor would vouch for the rewrite.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from logging.handlers import SysLogHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rewind.audit import GENESIS_HASH, ChainProblem, verify_chain, verify_links
from rewind.audit.models import AuditChainHead, AuditEvent
from rewind.audit.selectors import audit_anchored_seq, audit_chain_position
from rewind.lib.crypto import key_id, signing_key

logger = logging.getLogger(__name__)

SIGNED_AS = "zerto-rewind audit anchor v1"
SYSLOG_PREFIX = "zerto-rewind audit anchor "
_TAIL_BYTES = 8192


def _key() -> Ed25519PrivateKey:
    return signing_key(settings.REWIND_AUDIT_ANCHOR_KEY)


@dataclass(frozen=True)
class Anchor:
    seq: int
    hash: str
    time: str  # ISO 8601, UTC, when it was published
    key: str  # the signing key's id
    sig: str  # base64 Ed25519 signature of ``signed_bytes``
    where: str = ""  # "line N of FILE", once read back

    @property
    def signed_bytes(self) -> bytes:
        return f"{SIGNED_AS}|{self.seq}|{self.hash}|{self.time}".encode()

    def line(self) -> str:
        return json.dumps({"seq": self.seq, "hash": self.hash, "time": self.time, "key": self.key, "sig": self.sig})

    def signed_by(self, public: Ed25519PublicKey) -> bool:
        try:
            public.verify(base64.b64decode(self.sig), self.signed_bytes)
        except (InvalidSignature, ValueError, binascii.Error):
            return False
        return True


def anchor_sign(seq: int, chain_hash: str, *, now: datetime | None = None) -> Anchor:
    key = _key()
    when = (now or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    unsigned = Anchor(seq=seq, hash=chain_hash, time=when, key=key_id(key.public_key()), sig="")
    return Anchor(**{**unsigned.__dict__, "sig": base64.b64encode(key.sign(unsigned.signed_bytes)).decode()})


# --- reading ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnchorProblem:
    anchor: Anchor | None
    where: str
    reason: str
    seq: int  # the chain's event it concerns


def _parse(text: str, where: str) -> Anchor | AnchorProblem:
    start = text.find("{")  # a syslog copy carries a prefix before the object
    try:
        data: Any = json.loads(text[start : text.rfind("}") + 1]) if start >= 0 else {}
        return Anchor(
            seq=int(data["seq"]), hash=str(data["hash"]), time=str(data["time"]), key=str(data["key"]),
            sig=str(data["sig"]), where=where,
        )  # fmt: skip
    except (ValueError, TypeError, KeyError):
        return AnchorProblem(None, where, "it is not an anchor this service wrote (unreadable)", 0)


def read_anchors(path: Path) -> Iterator[Anchor | AnchorProblem]:
    """Every anchor in ``path`` in order (blank lines and, in a syslog copy, other lines skipped)."""
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, text in enumerate(lines, 1):
            if text.strip() and (SYSLOG_PREFIX in text or text.lstrip().startswith("{")):
                yield _parse(text, f"line {number} of {path}")


def latest_anchor(path: Path) -> Anchor | AnchorProblem | None:
    """The last anchor of ``path`` (read from its tail), or None when none was published there."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    lines = [line for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    return _parse(lines[-1], f"the last line of {path}")


# --- checking --------------------------------------------------------------------------------------


def _mismatch(anchor: Anchor, found: str | None, last_seq: int, public: Ed25519PublicKey) -> str | None:
    if not anchor.signed_by(public):
        ours = key_id(public)
        other = f" (key {anchor.key}; this service's is {ours})" if anchor.key != ours else ""
        return f"its signature does not verify: forged, corrupted or signed with another key{other}"
    if found is None:
        end = f"ends at event #{last_seq}" if last_seq else "is empty"
        return f"the chain {end}, but event #{anchor.seq} was published: events were removed"
    if found != anchor.hash:
        return f"event #{anchor.seq} does not have the hash published for it: the chain was rewritten"
    return None


def _hashes(seqs: Sequence[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for i in range(0, len(seqs), 500):
        rows = AuditEvent.objects.filter(seq__in=seqs[i : i + 500]).values_list("seq", "hash")
        found.update((seq, chain_hash) for seq, chain_hash in rows if seq is not None and chain_hash is not None)
    return found


def anchors_check(anchors: Sequence[Anchor | AnchorProblem]) -> tuple[int, AnchorProblem | None]:
    """(anchors that match, the first that does not or None), in the order given."""
    public = _key().public_key()
    last_seq = audit_chain_position()[0]
    found = _hashes([a.seq for a in anchors if isinstance(a, Anchor)])
    for matched, anchor in enumerate(anchors):
        if isinstance(anchor, AnchorProblem):
            return matched, anchor
        reason = _mismatch(anchor, found.get(anchor.seq), last_seq, public)
        if reason is not None:
            return matched, AnchorProblem(anchor, anchor.where, reason, anchor.seq)
    return len(anchors), None


@dataclass(frozen=True)
class ChainCheck:
    events: int  # intact events before the first break (all of them when ok)
    problem: ChainProblem | None
    anchors: int  # anchors checked and matched
    anchor_problem: AnchorProblem | None
    anchor_files: tuple[Path, ...]

    @property
    def ok(self) -> bool:
        return self.problem is None and self.anchor_problem is None

    @property
    def broken_at(self) -> int | None:
        if self.problem is not None:
            return self.problem.seq
        return self.anchor_problem.seq if self.anchor_problem is not None else None

    @property
    def reason(self) -> str:
        if self.problem is not None:
            return self.problem.reason
        if self.anchor_problem is not None:
            return f"anchor at {self.anchor_problem.where}: {self.anchor_problem.reason}"
        return ""


def chain_check(
    *, every_anchor: bool = False, anchor_files: Sequence[Path] = (), now: datetime | None = None
) -> ChainCheck:
    """Walk the chain, then hold it against the anchors: the newest of the configured file, or every anchor of
    ``anchor_files`` with ``every_anchor``. Read-only.

    Also a failure, never OK: the configured file missing or cut back below what the head row says was anchored
    (``anchor_file_cut``), and events older than an anchor interval plus its grace that no anchor covers
    (``unanchored_problem``): a cut or a rewrite of those would not show.
    """
    configured = Path(settings.REWIND_AUDIT_ANCHOR_FILE)
    files = tuple(anchor_files) or (configured,)
    checked, problem = verify_chain()
    anchors: list[Anchor | AnchorProblem] = []
    for path in files:
        if every_anchor:
            anchors += list(read_anchors(path)) if path.exists() or anchor_files else []
        elif (latest := latest_anchor(path)) is not None:
            anchors.append(latest)
    matched, anchor_problem = anchors_check(anchors)
    if anchor_problem is None and configured in files:
        anchor_problem = anchor_file_cut(configured)
    if problem is None and anchor_problem is not None:
        # The chain links throughout, but not to this anchor: it was rewritten or cut at or before
        # the anchor's event, so only what an earlier anchor still vouches for is intact.
        checked = _vouched_for_below(anchor_problem.seq, files)
    elif problem is None:
        covered = max((a.seq for a in anchors if isinstance(a, Anchor)), default=0)
        problem = unanchored_problem(covered=covered, now=now)
        checked = covered if problem is not None else checked
    return ChainCheck(checked, problem, matched, anchor_problem, files)


def anchor_file_cut(path: Path) -> AnchorProblem | None:
    """The anchor file missing, or its newest anchor older than the newest the head row says was published: someone
    removed or cut it (the publisher writes the file first, then the row)."""
    anchored = audit_anchored_seq()
    latest = latest_anchor(path)
    if not anchored or isinstance(latest, AnchorProblem) or (latest is not None and latest.seq >= anchored):
        return None  # never anchored, the file's own problem (named by anchors_check), or whole
    if latest is not None and not latest.signed_by(_key().public_key()):
        return None  # a forged last line: anchors_check names it
    found = "the file is missing or empty" if latest is None else f"its newest anchor is of event #{latest.seq}"
    return AnchorProblem(
        latest,
        f"the end of {path}",
        f"{found}, but anchors were published up to event #{anchored} (the chain's head row records it): "
        "the file was removed, cut back or replaced; put it back, or hold the chain against a copy "
        "(audit_verify --anchors FILE)",
        anchored,
    )


def unanchored_problem(*, covered: int, now: datetime | None = None) -> ChainProblem | None:
    """The chained events after ``covered`` (the newest anchor's event) recorded longer than an anchor interval
    plus its grace before ``now``, as a problem: no anchor protects them."""
    window = settings.REWIND_AUDIT_ANCHOR_INTERVAL_S + settings.REWIND_AUDIT_ANCHOR_GRACE_S
    stale = AuditEvent.objects.filter(seq__gt=covered, time__lt=(now or timezone.now()) - timedelta(seconds=window))
    first = stale.order_by("seq").values_list("seq", "time").first()
    if first is None or first[0] is None:
        return None
    return ChainProblem(
        first[0],
        f"{stale.count()} event(s) recorded more than {window} s ago are covered by no anchor (the first: "
        f"#{first[0]}, recorded {first[1].isoformat(timespec='seconds')}): a cut or a rewrite of them would "
        "not show; is the beat publishing anchors (REWIND_AUDIT_ANCHOR_INTERVAL_S)?",
    )


def _vouched_for_below(seq: int, files: Sequence[Path]) -> int:
    """The last event before ``seq`` whose anchor (in ``files``) the chain still matches; 0 if none: the chain's
    links prove everything before it. Reads every anchor of the files, so only after a failed check."""
    earlier = [a for path in files if path.is_file() for a in read_anchors(path) if isinstance(a, Anchor)]
    earlier = [a for a in earlier if a.seq < seq]
    public = _key().public_key()
    found = _hashes([a.seq for a in earlier])
    last_seq = audit_chain_position()[0]
    return max((a.seq for a in earlier if _mismatch(a, found.get(a.seq), last_seq, public) is None), default=0)


# --- publishing ------------------------------------------------------------------------------------


class _StrictSyslog(SysLogHandler):
    def handleError(self, record: logging.LogRecord) -> None:
        raise  # called inside emit's except block: the caller hears of the failure


def _syslog_handler(target: str) -> SysLogHandler:
    parts = urlsplit(target)
    if parts.scheme in ("udp", "tcp") and parts.hostname:
        kind = socket.SOCK_STREAM if parts.scheme == "tcp" else socket.SOCK_DGRAM
        return _StrictSyslog(address=(parts.hostname, parts.port or 514), socktype=kind)
    return _StrictSyslog(address=target)


def _syslog(target: str, line: str) -> None:
    handler = _syslog_handler(target)
    handler.ident = "zerto-rewind: "
    try:
        handler.emit(logging.LogRecord(__name__, logging.INFO, "", 0, SYSLOG_PREFIX + line, None, None))
    finally:
        handler.close()


@contextmanager
def _appending(path: Path) -> Iterator[int]:
    """The anchor file opened for appending only, locked against every other publisher until the block ends: the
    beat, a process stopping and ``audit_verify`` may publish at once, and each must read the newest anchor,
    decide and append as one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # lets the lock go


@dataclass(frozen=True)
class Publication:
    published: Anchor | None
    note: str  # what happened, in words
    found: ChainCheck | None = None  # a break found on the way, published over or not: the caller reports it


def _follows(previous: Anchor | AnchorProblem | None, seq: int, path: Path) -> tuple[str, ChainCheck | None]:
    """(why the chain up to ``seq`` may not be anchored, or ""; the break found on the way, if any). A broken link
    since the previous anchor is published over: it stays in the chain for every check to find, and the new
    anchor keeps the events after it from being rewritten unseen."""
    if isinstance(previous, Anchor):
        _matched, mismatch = anchors_check([previous])
        if mismatch is not None:
            found = ChainCheck(_vouched_for_below(mismatch.seq, (path,)), None, 0, mismatch, (path,))
            return f"the chain does not match the last anchor ({mismatch.where}): {mismatch.reason}", found
        end, problem = verify_links(after_seq=previous.seq, after_hash=previous.hash, up_to=seq, head_seq=seq)
    elif previous is None:
        end, problem = verify_chain()
    else:
        return f"the last line of the file is no anchor: {previous.reason}", ChainCheck(0, None, 0, previous, (path,))
    if problem is None and end < seq:
        return f"the chain ends at event #{end} before #{seq}", None
    return "", ChainCheck(end, problem, 0, None, (path,)) if problem is not None else None


def audit_anchor_publish(*, now: datetime | None = None) -> Publication:
    """Publish the chain's head as a signed anchor (file, then syslog when configured), and record in the head row
    that it was published.

    Publishes nothing when nothing was appended since the last anchor, when the chain does not match it, or when
    the file lost anchors the head row says were published (each logged and returned as ``found``); a broken
    link since the last anchor is published over and returned as ``found``. Raises ``OSError`` when the file
    cannot be written (a syslog failure is only logged). Safe to repeat and to run from several processes at
    once.
    """
    path = Path(settings.REWIND_AUDIT_ANCHOR_FILE)
    with _appending(path) as fd:
        publication = _publish_to(fd, path, now)
    if publication.published is None:
        return publication
    anchor = publication.published
    _anchored_record(anchor.seq)
    target = settings.REWIND_AUDIT_ANCHOR_SYSLOG
    if target:
        try:
            _syslog(target, anchor.line())
        except OSError as exc:
            logger.error("audit anchor for event #%s not sent to syslog %s: %s", anchor.seq, target, exc)
    logger.info("audit anchor published: event #%s", anchor.seq)
    return publication


def _publish_to(fd: int, path: Path, now: datetime | None) -> Publication:
    seq, chain_hash = audit_chain_position()
    chain_hash = chain_hash if seq else GENESIS_HASH
    cut = anchor_file_cut(path)
    if cut is not None:
        logger.error("audit anchor NOT published: %s; run manage.py audit_verify", cut.reason)
        intact = _vouched_for_below(cut.seq, (path,))
        return Publication(None, f"not published: {cut.reason}", ChainCheck(intact, None, 0, cut, (path,)))
    previous = latest_anchor(path)
    if isinstance(previous, Anchor) and (previous.seq, previous.hash) == (seq, chain_hash):
        return Publication(None, f"unchanged since the last anchor (event #{seq})")
    if not seq and previous is None:
        return Publication(None, "the chain is empty: nothing to anchor yet")
    refused, found = _follows(previous, seq, path)
    if refused:
        logger.error("audit anchor NOT published: %s; run manage.py audit_verify --anchors", refused)
        return Publication(None, f"not published: {refused}", found)
    anchor = anchor_sign(seq, chain_hash, now=now)
    os.write(fd, (anchor.line() + "\n").encode())
    os.fsync(fd)
    if found is not None:
        logger.error(
            "audit chain broken at event #%s: %s; anchored at #%s all the same", found.broken_at, found.reason, seq
        )
    return Publication(anchor, f"published event #{seq}", found)


def _anchored_record(seq: int) -> None:
    """Record in the head row that anchors were published up to ``seq`` (it only moves forward). After the file has
    the anchor: a row ahead of the file would read as a cut file. A failure is only logged."""
    try:
        with transaction.atomic():  # a savepoint: a refusal leaves a caller's transaction usable
            AuditChainHead.objects.filter(Q(anchored_seq__isnull=True) | Q(anchored_seq__lt=seq), pk=1).update(
                anchored_seq=seq
            )
    except Exception:
        logger.exception("audit anchor for event #%s published, but not recorded in the chain's head row", seq)
