"""The site ledger on the node's disk: a hash chain of JSON lines, and a head kept apart from it.

**What is recorded.**  One JSON line per release that left the site (``kind: release``), and one per
operator action on the ledger: its creation (``open``), an explicit reset (``reset``), the removal of
a torn last line (``repair``) and the adoption of a ledger without a chain or without a head
(``adopt``).  Line ``i`` (1-based) carries ``seq = i`` and ``prev`` = the hash of line ``i - 1``
(:data:`GENESIS` for line 1), and the hash of a line is the SHA-256 of its text, so the lines form a
chain: changing, removing or reordering one breaks every later link.  Line format (``format`` =
:data:`FORMAT`, keys sorted)::

    {"client": 0, "format": "fdp-flower-site-ledger/2", "kind": "release", "mechanism": "fdp_admm_primal",
     "neighbouring": "replace_one", "noise": "os_entropy", "prev": "<64 hex>", "round": 1, "run": 123,
     "scenario": "sha256:...", "sensitivity": 0.01, "seq": 2, "sigma": 0.1, "time": "2025-01-01T00:00:00Z"}

**The head** (:class:`LedgerHead`, a small JSON file in another directory: by default the ledger
directory's sibling ``<ledger-dir>-head``, or the node config's ``ledger-head-dir``) records the
ledger's id, its number of lines and the hash of the last one, and what its releases add up to
(count and composed Gaussian precision).  The chain alone cannot tell a ledger cut at a line boundary
from a complete one; the head can.  A ledger is used only if its lines form a chain and its first
``head.count`` lines end in ``head.hash``; it may be *longer* than its head (a crash between the two
writes: an over-count, never an under-count).  So a ledger that was truncated at a line boundary,
replaced by an older copy, edited, deleted or left on an unmounted volume while its head survives
fails closed -- every release is refused with one line naming the files and the command that
resolves it -- until the operator acts with an explicit command (``fdp-flower site-ledger``):

- ``repair``: removes an incomplete last line (a crash or a full disk while it was written: that
  release never left the site) and logs the removed bytes in a ``repair`` line;
- ``reset``: starts a new ledger, saying what it forgets (the releases and the eps they add up to, from
  the ledger and from the head); the old file is moved aside, never deleted, and the new ledger's
  first line records the reset;
- ``adopt``: takes an existing ledger as it is -- a ledger without a chain (format
  ``fdp-flower-site-ledger/1``, written before chains existed) or a chained ledger whose head was
  lost -- and records that in an ``adopt`` line.

**Order of writes.**  A release's line is appended and ``fsync``-ed (and the directory too, when the
file is created), then the head is replaced atomically (a temporary file, ``fsync``, ``rename``,
``fsync`` of its directory), all **before** the noisy value is computed, so nothing leaves the site
uncharged; a crash in between over-counts.  A failed append is cut back to the previous end of the
file, so a full disk normally leaves no torn line (a crash in the middle of a write still can:
``repair``).  Reads and writes hold a ``flock`` on a lock file next to the head, so several
ClientApp processes of one site (or several SuperNodes sharing a ledger) cannot both spend the last
of a budget.  A refused release writes nothing: both files stay byte-identical.

What the head does *not* protect against: deleting (or rolling back) the ledger **and** its head
together, e.g. the whole ``FLWR_HOME``; keep the head where the ledger's own failures and deletions do
not reach it (another volume, another backup).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fdp_flower.privacy.ledger import NEIGHBOURING_RELATIONS, GaussianRelease, pld_epsilon
from fdp_flower.privacy.site_policy import (
    SitePolicy,
    SiteRefusal,
    SiteRelease,
    SiteTotals,
    check_release,
    site_epsilon,
    site_totals,
)

FORMAT = "fdp-flower-site-ledger/2"
#: Ledgers written before the hash chain: one release per line, no ``seq`` / ``prev`` (adopt them).
LEGACY_FORMAT = "fdp-flower-site-ledger/1"
HEAD_FORMAT = "fdp-flower-site-ledger-head/1"
#: ``prev`` of the first line.
GENESIS = "0" * 64
#: Kinds of line: the first line is one of FIRST_KINDS.
KINDS = ("open", "release", "repair", "reset", "adopt")
FIRST_KINDS = ("open", "reset", "adopt")
_RELEASE_FIELDS = ("run", "scenario", "client", "round", "mechanism", "sensitivity", "sigma", "neighbouring", "noise")
#: The longest torn tail a repair line keeps verbatim (its SHA-256 and length are always kept).
MAX_KEPT_TORN_BYTES = 65536
COMMAND = "fdp-flower site-ledger"


class SiteLedgerError(RuntimeError):
    """The site ledger cannot be read, trusted or written; one line naming the file.  Nothing is released."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def line_hash(line: str) -> str:
    """The chain hash of one ledger line (its text without the newline)."""
    return hashlib.sha256(line.encode()).hexdigest()


def release_fields(entry: SiteRelease) -> dict[str, object]:
    """The JSON fields of a release line."""
    r = entry.release
    return {"time": entry.time, "run": int(entry.run), "scenario": entry.scenario, "client": r.client,
            "round": r.round, "mechanism": r.mechanism, "sensitivity": r.sensitivity, "sigma": r.sigma,
            "neighbouring": r.neighbouring, "noise": entry.noise_source}


def _release_of(row: Mapping[str, object]) -> SiteRelease:
    release = GaussianRelease(client=int(row["client"]), round=int(row["round"]),
                              sensitivity=float(row["sensitivity"]), sigma=float(row["sigma"]),
                              neighbouring=row["neighbouring"], mechanism=str(row["mechanism"]))
    return SiteRelease(int(row["run"]), release, str(row["noise"]), str(row.get("scenario", "")),
                       str(row.get("time", "")))


def chain_line(seq: int, prev: str, kind: str, fields: Mapping[str, object]) -> str:
    """Line ``seq`` of a ledger (without its newline) following a line of hash ``prev``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return json.dumps({**fields, "format": FORMAT, "seq": int(seq), "prev": prev, "kind": kind}, sort_keys=True)


@dataclass(frozen=True)
class LedgerEntry:
    """One line of a chained ledger."""

    seq: int
    kind: str
    fields: dict = field(repr=False)
    hash: str = field(repr=False)
    release: SiteRelease | None = None


@dataclass(frozen=True)
class LedgerScan:
    """What a ledger file holds, read without trusting it (:func:`scan_ledger`).

    ``entries`` are the chained lines up to the first problem; ``problem`` names it (None: every
    complete line is a link of the chain); ``torn`` is an incomplete last line (bytes after the last
    newline), ``complete_bytes`` where the complete lines end; ``legacy`` the releases of a ledger
    without a chain (``LEGACY_FORMAT``).
    """

    entries: tuple[LedgerEntry, ...] = ()
    problem: str | None = None
    torn: bytes = b""
    complete_bytes: int = 0
    legacy: tuple[SiteRelease, ...] | None = None
    lines: int = 0  # complete lines

    def without_torn(self) -> LedgerScan:
        return LedgerScan(self.entries, self.problem, b"", self.complete_bytes, self.legacy, self.lines)

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def last_hash(self) -> str:
        return self.entries[-1].hash if self.entries else GENESIS

    @property
    def ledger_id(self) -> str | None:
        return str(self.entries[0].fields.get("ledger")) if self.entries else None

    @property
    def releases(self) -> list[SiteRelease]:
        if self.legacy is not None:
            return list(self.legacy)
        return [e.release for e in self.entries if e.release is not None]


def scan_ledger(data: bytes) -> LedgerScan:
    """Read a ledger file's bytes without trusting them: every complete line must parse and follow
    the previous one in the chain; the first that does not stops the scan (``problem``)."""
    end = data.rfind(b"\n") + 1
    torn, body = data[end:], data[:end]
    lines = body.count(b"\n")
    entries: list[LedgerEntry] = []
    legacy: list[SiteRelease] = []
    prev = GENESIS
    for number, raw in enumerate(body.split(b"\n")[:-1], start=1):
        try:
            row = json.loads(raw.decode())
            if not isinstance(row, dict):
                raise ValueError(f"a {type(row).__name__}, not an object")
            fmt = row.get("format")
            if fmt == LEGACY_FORMAT and not entries:
                legacy.append(_release_of(row))
                continue
            if fmt != FORMAT or legacy:
                raise ValueError(f"format {fmt!r} != {FORMAT!r}" if fmt != FORMAT else
                                 "a chained line after lines without a chain")
            kind = row.get("kind")
            first = kind in FIRST_KINDS and "ledger" in row
            if kind not in KINDS or (first if number > 1 else not first) or (number > 1 and kind in ("open", "reset")):
                raise ValueError(f"kind {kind!r} cannot be line {number}")
            release = _release_of(row) if kind == "release" else None
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            return LedgerScan(tuple(entries), f"line {number} is corrupt ({reason})", torn, end,
                              tuple(legacy) if legacy else None, lines)
        if row.get("seq") != number or row.get("prev") != prev:
            return LedgerScan(tuple(entries), f"line {number} does not follow line {number - 1} (its "
                              f"{'seq' if row.get('seq') != number else 'prev hash'} differs): the ledger was edited",
                              torn, end, None, lines)
        prev = line_hash(raw.decode())
        entries.append(LedgerEntry(number, kind, row, prev, release))
    return LedgerScan(tuple(entries), None, torn, end, tuple(legacy) if legacy else None, lines)


@dataclass(frozen=True)
class LedgerHead:
    """The head of a ledger: which ledger, how many lines, the hash of the last, what its releases add up to.

    ``precision`` is, per neighbouring relation, sum_t (Delta_t / sigma_t)^2 over the releases
    re-expressed in it (None where a release cannot be): the one Gaussian they compose to, so the
    head alone says what a lost ledger had spent.
    """

    ledger: str
    ledger_id: str
    count: int
    hash: str
    releases: int
    precision: dict
    time: str = ""

    def as_json(self) -> str:
        return json.dumps({"format": HEAD_FORMAT, "ledger": self.ledger, "ledger-id": self.ledger_id,
                           "count": self.count, "hash": self.hash, "releases": self.releases,
                           "precision": self.precision, "time": self.time}, sort_keys=True) + "\n"

    @classmethod
    def parse(cls, text: str) -> LedgerHead:
        row = json.loads(text)
        if not isinstance(row, dict) or row.get("format") != HEAD_FORMAT:
            raise ValueError(f"format {row.get('format') if isinstance(row, dict) else None!r} != {HEAD_FORMAT!r}")
        head = cls(str(row["ledger"]), str(row["ledger-id"]), int(row["count"]), str(row["hash"]),
                   int(row["releases"]), dict(row["precision"]), str(row.get("time", "")))
        if head.count < 0 or len(head.hash) != 64:
            raise ValueError(f"count {head.count} / hash {head.hash!r}")
        return head

    def eps(self, delta: float, neighbouring: str) -> float | None:
        """eps (PLD) of the releases the head records, at ``delta`` under ``neighbouring`` (None: unknown)."""
        precision = self.precision.get(neighbouring)
        if precision is None:
            return None
        if precision <= 0:
            return 0.0
        return pld_epsilon([GaussianRelease(0, 0, 1.0, float(precision) ** -0.5)], delta)


def composed_precision(releases: Sequence[SiteRelease]) -> dict[str, float | None]:
    """sum_t (Delta_t / sigma_t)^2 of ``releases`` under each relation (None if one cannot be converted)."""
    out: dict[str, float | None] = {}
    for relation in NEIGHBOURING_RELATIONS:
        try:
            out[relation] = math.fsum((r.release.under(relation).sensitivity / r.release.sigma) ** 2
                                      for r in releases)
        except ValueError:
            out[relation] = None
    return out


def default_head_path(ledger_path: str | Path, head_dir: str | Path | None = None) -> Path:
    """Where the head of ``ledger_path`` lives: ``<head_dir>/<ledger dir name>-<8 hex>.head.json``, the
    hex naming the ledger's absolute path (several ledgers may share a head directory); ``head_dir``
    defaults to the ledger directory's sibling ``<ledger dir>-head``."""
    ledger_path = Path(ledger_path).expanduser().absolute()
    base = Path(head_dir).expanduser().absolute() if head_dir else \
        ledger_path.parent.with_name(ledger_path.parent.name + "-head")
    tag = hashlib.sha256(str(ledger_path).encode()).hexdigest()[:8]
    return base / f"{ledger_path.parent.name or 'ledger'}-{tag}.head.json"


@dataclass(frozen=True)
class LedgerState:
    """A ledger and its head as found on disk (:meth:`SiteLedger.inspect`)."""

    exists: bool
    scan: LedgerScan
    head: LedgerHead | None
    head_error: str | None
    problem: str | None  # why no release may use it (one line), None: it is trusted

    @property
    def fresh(self) -> bool:
        """Nothing recorded anywhere yet (or a head of zero lines whose ledger was never written)."""
        return self.problem is None and self.scan.count == 0 and self.scan.legacy is None


class SiteLedger:
    """The ledger file ``path`` (mode 0600, its directory 0700) and its head ``head`` (default
    :func:`default_head_path`, mode 0600, directory 0700), created when first charged.

    Parameters
    ----------
    path : str or Path
        The JSON-lines file (:meth:`SitePolicy.ledger_path`).
    head : str or Path, optional
        The head file (:meth:`SitePolicy.ledger_head_path`); it must not be in the ledger's directory.
    fsync : callable, optional
        The function that flushes a file descriptor to disk. (default: ``os.fsync``, looked up at
        each call)
    """

    def __init__(self, path: str | Path, head: str | Path | None = None,
                 fsync: Callable[[int], None] | None = None) -> None:
        self.path = Path(path).expanduser()
        self.head_path = Path(head).expanduser() if head is not None else default_head_path(self.path)
        if self.head_path.absolute().parent == self.path.absolute().parent:
            raise ValueError(f"the head of site ledger {self.path} must be in another directory than the ledger "
                             f"(got {self.head_path}): a head kept with its ledger is deleted with it")
        self._fsync_fn = fsync

    # ------------------------------------------------------------------ files
    def _fsync(self, fd: int) -> None:
        (self._fsync_fn or os.fsync)(fd)

    def _fsync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def _hint(self, command: str) -> str:
        return f"{COMMAND} {command} --ledger {self.path} --head {self.head_path}"

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        """The lock file next to the head (created with its directory, mode 0700)."""
        lock = self.head_path.with_name(self.head_path.name + ".lock")
        try:
            self.head_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise SiteLedgerError(f"site ledger head {self.head_path}: {exc.strerror or exc}; nothing was "
                                  "released") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # also releases the lock

    def _read_bytes(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SiteLedgerError(f"site ledger {self.path}: {exc.strerror or exc}") from None

    def _read_head(self) -> tuple[LedgerHead | None, str | None]:
        try:
            text = self.head_path.read_text()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise SiteLedgerError(f"site ledger head {self.head_path}: {exc.strerror or exc}") from None
        try:
            return LedgerHead.parse(text), None
        except (ValueError, KeyError, TypeError) as exc:
            return None, " ".join(f"{type(exc).__name__}: {exc}".split())

    # ------------------------------------------------------------------ checking
    def inspect(self) -> LedgerState:
        """The ledger and its head as they are, with the one-line reason no release may use them (or None).
        Takes no lock: call it under :meth:`_locked` to act on the answer."""
        data = self._read_bytes()
        scan = scan_ledger(data) if data is not None else LedgerScan()
        head, head_error = self._read_head()
        return LedgerState(data is not None, scan, head, head_error, self._problem(data is not None, scan, head,
                                                                                 head_error))

    def _problem(self, exists: bool, scan: LedgerScan, head: LedgerHead | None, head_error: str | None) -> str | None:
        ledger, head_file = f"site ledger {self.path}", f"its head {self.head_path}"
        reset = f"or reset it ({self._hint('reset')} says what a reset forgets)"
        if head_error is not None:
            return f"{head_file} is corrupt ({head_error}): restore it from a copy, {reset}"
        if scan.problem is not None:
            return f"{ledger}: {scan.problem}; restore the ledger from a copy that matches {head_file}, {reset}"
        if scan.legacy is not None:
            return (f"{ledger} has no hash chain (format {LEGACY_FORMAT}, {len(scan.legacy)} releases"
                    + (", and an incomplete last line" if scan.torn else "") + "): check it is complete and adopt it "
                    f"once with {self._hint('adopt')}")
        if scan.torn:
            return (f"{ledger}: line {scan.lines + 1} is incomplete (the node stopped, or the disk filled up, while "
                    f"writing it; that release never left the site): remove it with {self._hint('repair')}")
        if head is None:
            if not exists or scan.count == 0:
                return None  # a new site: nothing recorded anywhere yet
            return (f"{ledger} has no head ({self.head_path} is missing), so a rollback cannot be ruled out: restore "
                    f"the head, or, if this ledger is complete, adopt it with {self._hint('adopt')}")
        if head.ledger != str(self.path.absolute()):
            return (f"{head_file} belongs to another ledger ({head.ledger}): give each ledger its own head, or "
                    f"{reset}")
        if head.count == 0 and scan.count == 0:
            return None  # created, nothing written yet
        if not exists or scan.count == 0:
            return (f"{ledger} is {'missing' if not exists else 'empty'}, but {head_file} records {head.count} lines "
                    f"({head.releases} releases): it was deleted, moved, emptied or its volume is not mounted; "
                    f"releases are refused until it is restored, {reset}")
        if scan.ledger_id != head.ledger_id:
            return (f"{ledger} is not the ledger {head_file} belongs to (ledger id {scan.ledger_id}, the head's "
                    f"{head.ledger_id}): it was replaced; restore the right one, {reset}")
        if scan.count < head.count:
            return (f"{ledger} has {scan.count} lines but {head_file} records {head.count} ({head.releases} "
                    f"releases): lines were removed (cut at a line boundary, or replaced by an older copy); "
                    f"releases are refused until the whole ledger is restored, {reset}")
        if scan.entries[head.count - 1].hash != head.hash:
            return (f"{ledger}: line {head.count} is not the line {head_file} records (its hash differs): the ledger "
                    f"was replaced or edited; restore the right one, {reset}")
        return None

    def _trusted(self) -> LedgerState:
        state = self.inspect()
        if state.problem is not None:
            raise SiteLedgerError(state.problem)
        return state

    def read(self) -> list[SiteRelease]:
        """Every release recorded so far (empty for a new site); :class:`SiteLedgerError` (one line) if the
        ledger cannot be trusted."""
        with self._locked(exclusive=False):
            return self._trusted().scan.releases

    def totals(self, policy: SitePolicy, run: int) -> SiteTotals:
        """The site's totals now (lifetime and run ``run``), without charging anything."""
        return site_totals(self.read(), policy, run)

    # ------------------------------------------------------------------ writing
    def _write_head(self, scan_entries: Sequence[LedgerEntry], ledger_id: str) -> LedgerHead:
        releases = [e.release for e in scan_entries if e.release is not None]
        head = LedgerHead(str(self.path.absolute()), ledger_id, len(scan_entries),
                          scan_entries[-1].hash if scan_entries else GENESIS, len(releases),
                          composed_precision(releases), _now())
        tmp = self.head_path.with_name(f"{self.head_path.name}.tmp-{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                data = head.as_json().encode()
                if os.write(fd, data) != len(data):
                    raise OSError("short write")
                self._fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.head_path)
            self._fsync_dir(self.head_path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise SiteLedgerError(f"site ledger head {self.head_path}: could not write it "
                                  f"({getattr(exc, 'strerror', None) or exc}); nothing was released") from None
        return head

    def _append(self, lines: Sequence[str], *, create: bool) -> None:
        """Append ``lines`` and fsync them; on failure cut the file back to where it ended (no torn line)."""
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise SiteLedgerError(f"site ledger {self.path}: could not {'create' if create else 'open'} it "
                                  f"({exc.strerror or exc}); nothing was released") from None
        try:
            before = os.fstat(fd).st_size
            data = "".join(line + "\n" for line in lines).encode()
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write ({written} of {len(data)} bytes)")
                self._fsync(fd)
                if create:  # the new file's directory entry must survive a crash too
                    self._fsync_dir(self.path.parent)
            except OSError as exc:
                cut = ""
                try:
                    os.ftruncate(fd, before)
                except OSError:
                    cut = f"; it may now end in an incomplete line: {self._hint('repair')}"
                with contextlib.suppress(OSError):  # best effort: a crash may still bring the line back
                    self._fsync(fd)
                what = "create it" if create and not before else "record the release"
                raise SiteLedgerError(f"site ledger {self.path}: could not {what} "
                                      f"({getattr(exc, 'strerror', None) or exc}); nothing was released{cut}") from None
        finally:
            os.close(fd)

    @staticmethod
    def _chain(entries: list[LedgerEntry], kind_fields: Sequence[tuple[str, dict]]) -> list[str]:
        """Chain ``kind_fields`` after ``entries`` (extended in place); returns the new lines."""
        lines = []
        for kind, fields in kind_fields:
            line = chain_line(len(entries) + 1, entries[-1].hash if entries else GENESIS, kind, fields)
            row = json.loads(line)
            entries.append(LedgerEntry(len(entries) + 1, kind, row, line_hash(line),
                                       _release_of(row) if kind == "release" else None))
            lines.append(line)
        return lines

    def _extend(self, state: LedgerState, kind_fields: Sequence[tuple[str, dict]]) -> list[LedgerEntry]:
        """Append lines after ``state``'s (a new ledger, opened by an ``open`` line, when it is fresh), fsync
        them, then write the head; returns every entry after the write."""
        entries = list(state.scan.entries)
        if not entries:
            ledger_id = state.head.ledger_id if state.head is not None else secrets.token_hex(16)
            if state.head is None:  # the head first: a crash before the ledger leaves a head of 0 lines
                self._write_head([], ledger_id)
            kind_fields = [("open", {"ledger": ledger_id, "time": _now(), "note": "new site ledger"}), *kind_fields]
        lines = self._chain(entries, kind_fields)
        self._append(lines, create=not state.exists)
        self._write_head(entries, str(entries[0].fields["ledger"]))
        return entries

    def _replace_ledger(self, kind_fields: Sequence[tuple[str, dict]], keep_old_as: Path | None) -> list[LedgerEntry]:
        """A new ledger of ``kind_fields`` (its first line names a new ledger id) in place of the old one,
        which stays as ``keep_old_as``.  Order: the new file under a temporary name (fsynced), the old one
        linked (or copied) to ``keep_old_as``, the head of the new one, then the rename: a crash at any point
        leaves the old ledger, or the new one, next to a head that either matches it or fails closed."""
        entries: list[LedgerEntry] = []
        lines = self._chain(entries, kind_fields)
        tmp = self.path.with_name(f"{self.path.name}.new-{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                data = "".join(line + "\n" for line in lines).encode()
                if os.write(fd, data) != len(data):
                    raise OSError("short write")
                self._fsync(fd)
            finally:
                os.close(fd)
            if keep_old_as is not None:
                try:
                    os.link(self.path, keep_old_as)
                except OSError:
                    keep_old_as.write_bytes(self.path.read_bytes())
            self._write_head(entries, str(entries[0].fields["ledger"]))
            os.replace(tmp, self.path)
            self._fsync_dir(self.path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise SiteLedgerError(f"site ledger {self.path}: could not write the new ledger "
                                  f"({exc.strerror or exc})") from None
        return entries

    def charge(self, planned: SiteRelease, policy: SitePolicy) -> SiteTotals:
        """Check ``planned`` against ``policy`` and the whole (trusted) ledger (:func:`check_release`) and
        record it -- line fsynced, then head -- under the lock; returns the site's totals after it.  A
        :class:`~fdp_flower.privacy.site_policy.SiteRefusal` or a ledger that cannot be trusted
        (:class:`SiteLedgerError`) leaves both files untouched."""
        with self._locked(exclusive=True):
            stamped = SiteRelease(planned.run, planned.release, planned.noise_source, planned.scenario,
                                  planned.time or _now())
            state = self._trusted()
            history = state.scan.releases
            eps_after = check_release(history, stamped, policy)
            self._extend(state, [("release", release_fields(stamped))])
            return site_totals([*history, stamped], policy, stamped.run, lifetime_eps=eps_after)

    # ------------------------------------------------------------------ operator commands
    @staticmethod
    def _describe(releases: Sequence[SiteRelease], delta: float, neighbouring: str) -> str:
        try:
            eps = site_epsilon(releases, SitePolicy(max_delta=delta, neighbouring=neighbouring))
        except SiteRefusal as exc:
            return f"{len(releases)} releases ({exc})"
        return f"{len(releases)} releases (eps = {eps:.6g} at delta {delta:g}, {neighbouring}, PLD)"

    def _aside(self, tag: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{tag}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")

    def status(self, delta: float = 1e-5, neighbouring: str = "replace_one") -> tuple[bool, str]:
        """(trusted, one line): the ledger's state, what it holds and whether releases may use it."""
        with self._locked(exclusive=False):
            state = self.inspect()
        if state.problem is not None:
            return False, state.problem
        if state.fresh:
            return True, f"site ledger {self.path}: new (nothing recorded yet); its head is {self.head_path}"
        extra = state.scan.count - state.head.count
        return True, (f"site ledger {self.path}: {state.scan.count} lines, "
                      f"{self._describe(state.scan.releases, delta, neighbouring)}; matches its head "
                      f"{self.head_path}" + (f" (plus {extra} later line(s): a crash between the two writes, "
                                             "over-counted, never under-counted)" if extra else ""))

    def repair(self, yes: bool = False) -> str:
        """Remove an incomplete last line (its release never left the site: a line is written and fsynced
        before the noise is drawn) and log the removed bytes in a ``repair`` line.  Refused
        (:class:`SiteLedgerError`) for any other problem.  ``yes`` False: say what it would do only."""
        with self._locked(exclusive=True):
            state = self.inspect()
            scan = state.scan
            if not scan.torn:
                if state.problem is not None:
                    raise SiteLedgerError(f"nothing to repair (no incomplete last line), but {state.problem}")
                return f"site ledger {self.path}: no incomplete last line; nothing to repair"
            if scan.legacy is not None:
                raise SiteLedgerError(f"site ledger {self.path} has no hash chain to log the removal in: "
                                      f"{self._hint('adopt')} drops the incomplete line and adopts the rest")
            rest = self._problem(state.exists, scan.without_torn(), state.head, state.head_error)
            if rest is not None or not scan.entries:
                raise SiteLedgerError("repair only removes an incomplete last line; besides it, "
                                      f"{rest or 'the ledger holds no complete line'}")
            what = (f"the incomplete line {scan.lines + 1} ({len(scan.torn)} bytes, sha256 "
                    f"{hashlib.sha256(scan.torn).hexdigest()[:16]}...)")
            if not yes:
                return f"a repair of site ledger {self.path} would remove {what} and log it; add --yes to repair it"
            try:
                with open(self.path, "r+b") as fh:
                    fh.truncate(scan.complete_bytes)
                    fh.flush()
                    self._fsync(fh.fileno())
            except OSError as exc:
                raise SiteLedgerError(f"site ledger {self.path}: could not remove the incomplete line "
                                      f"({exc.strerror or exc})") from None
            fields = {"time": _now(), "removed_bytes": len(scan.torn),
                      "removed_sha256": hashlib.sha256(scan.torn).hexdigest(),
                      "removed_text": scan.torn[:MAX_KEPT_TORN_BYTES].decode(errors="replace"),
                      "note": "incomplete last line removed by the operator (its release never left the site)"}
            entries = self._extend(LedgerState(True, scan.without_torn(), state.head, None, None),
                                   [("repair", fields)])
            return f"repaired site ledger {self.path}: removed {what}, logged as line {len(entries)}"

    def reset(self, yes: bool = False, delta: float = 1e-5, neighbouring: str = "replace_one",
              reason: str = "") -> str:
        """Start a new ledger, whatever the old one's state; the old file stays as
        ``<ledger>.reset-<time>`` (never deleted).  Says what the reset forgets: the releases the old
        ledger holds and the ones its head records (eps at ``delta`` under ``neighbouring``); the new
        ledger's first line records it.  ``yes`` False: say it only."""
        with self._locked(exclusive=True):
            state = self.inspect()
            found = state.scan.releases
            forgets = f"{self._describe(found, delta, neighbouring)} readable in the ledger"
            if state.head is not None:
                head_eps = state.head.eps(delta, neighbouring)
                forgets += (f" and the {state.head.releases} releases its head records" +
                            (f" (eps = {head_eps:.6g})" if head_eps is not None else ""))
            elif state.head_error is not None:
                forgets += " and a corrupt head"
            why = state.problem or "the ledger was trusted"
            if not yes:
                return f"a reset of site ledger {self.path} would forget {forgets}; add --yes to reset it"
            kept = self._aside("reset") if state.exists else None
            fields = {"ledger": secrets.token_hex(16), "time": _now(), "forgets": forgets, "reason": reason or why,
                      "forgotten_releases": max(len(found), state.head.releases if state.head else 0),
                      "previous_ledger": str(kept) if kept else None, "previous_ledger_id": state.scan.ledger_id,
                      "previous_head": json.loads(state.head.as_json()) if state.head else None}
            self._replace_ledger([("reset", fields)], kept)
            return (f"reset site ledger {self.path}: forgot {forgets}; the old file is kept as {kept}; the new "
                    "ledger starts at eps = 0 and records the reset in its first line" if kept else
                    f"reset site ledger {self.path}: forgot {forgets} (the ledger file was missing); the new ledger "
                    "starts at eps = 0 and records the reset in its first line")

    def adopt(self, yes: bool = False, delta: float = 1e-5, neighbouring: str = "replace_one") -> str:
        """Take the ledger as it is: a ledger without a chain (its releases become the chained lines of a
        new file; the old one stays as ``<ledger>.v1-<time>``; an incomplete last line is dropped and
        logged), or a chained ledger without a head (an ``adopt`` line, then a new head).  Refused for a
        ledger that contradicts its head (that is a rollback: ``reset``).  ``yes`` False: say it only."""
        with self._locked(exclusive=True):
            state = self.inspect()
            scan = state.scan
            if scan.legacy is not None and scan.problem is None:
                what = self._describe(scan.legacy, delta, neighbouring)
                dropped = f", dropping an incomplete last line of {len(scan.torn)} bytes" if scan.torn else ""
                if not yes:
                    return (f"would adopt site ledger {self.path} (no hash chain): {what}{dropped}; add --yes to "
                            "adopt it")
                kept = self._aside("v1")
                fields = {"ledger": secrets.token_hex(16), "time": _now(), "adopted": what,
                          "previous_ledger": str(kept),
                          "previous_sha256": hashlib.sha256(self._read_bytes() or b"").hexdigest(),
                          "previous_format": LEGACY_FORMAT, "removed_bytes": len(scan.torn),
                          "removed_text": scan.torn[:MAX_KEPT_TORN_BYTES].decode(errors="replace"),
                          "note": "a ledger without a hash chain, adopted by the operator"}
                entries = self._replace_ledger([("adopt", fields), *(("release", release_fields(r))
                                                                     for r in scan.legacy)], kept)
                return (f"adopted site ledger {self.path}: {what}{dropped}, now a hash chain of {len(entries)} lines; "
                        f"the old file is kept as {kept}")
            if state.problem is None:
                return f"site ledger {self.path} matches its head {self.head_path}; nothing to adopt"
            if state.head is not None or state.head_error is not None or scan.problem is not None or scan.torn:
                raise SiteLedgerError("adopt takes a ledger without a hash chain or without a head; here "
                                      f"{state.problem}")
            what = self._describe(scan.releases, delta, neighbouring)
            if not yes:
                return f"would adopt site ledger {self.path} ({scan.count} lines, {what}) under a new head; add --yes"
            self._extend(state, [("adopt", {"time": _now(), "adopted": what, "head": str(self.head_path),
                                            "note": "a ledger without a head, adopted by the operator"})])
            return f"adopted site ledger {self.path} ({what}) under the new head {self.head_path}"


__all__ = ["COMMAND", "FORMAT", "GENESIS", "HEAD_FORMAT", "LEGACY_FORMAT", "LedgerEntry", "LedgerHead", "LedgerScan",
           "LedgerState", "SiteLedger", "SiteLedgerError", "chain_line", "composed_precision", "default_head_path",
           "line_hash", "release_fields", "scan_ledger"]
