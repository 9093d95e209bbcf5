"""The site ledger on the node's disk: one JSON line per release that left the site.

Append-only: a release's line is written and ``fsync``-ed (and the directory too, when the
file is created) **before** the noisy value is even computed, so nothing leaves the site
uncharged; a crash after the write and before the reply over-counts, never under-counts.
Check and append happen under an exclusive ``flock`` on the file, so several ClientApp
processes of one site (or several SuperNodes sharing a ledger directory) cannot both spend
the last of a budget.  A refused release writes nothing: the file stays byte-identical.

Line format (``format`` = :data:`FORMAT`)::

    {"format": "fdp-flower-site-ledger/1", "time": "2025-01-01T00:00:00Z", "run": 123,
     "scenario": "sha256:...", "client": 0, "round": 1, "mechanism": "fdp_admm_primal",
     "sensitivity": 0.01, "sigma": 0.1, "neighbouring": "replace_one", "noise": "os_entropy"}

A line that does not parse (e.g. the last one, torn by a crash while it was written -- that
release then never left the site) stops the site with a one-line :class:`SiteLedgerError`
naming the file and line: the ledger is never guessed at or rewritten by the code.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from fdp_flower.privacy.ledger import GaussianRelease
from fdp_flower.privacy.site_policy import SitePolicy, SiteRelease, SiteTotals, check_release, site_totals

FORMAT = "fdp-flower-site-ledger/1"
_FIELDS = ("run", "client", "round", "mechanism", "sensitivity", "sigma", "neighbouring", "noise")


class SiteLedgerError(RuntimeError):
    """The site ledger cannot be read or written; one line naming the file.  Nothing is released."""


def entry_line(entry: SiteRelease) -> str:
    """One ledger line (with its newline) of a release."""
    r = entry.release
    return json.dumps({"format": FORMAT, "time": entry.time, "run": int(entry.run), "scenario": entry.scenario,
                       "client": r.client, "round": r.round, "mechanism": r.mechanism,
                       "sensitivity": r.sensitivity, "sigma": r.sigma, "neighbouring": r.neighbouring,
                       "noise": entry.noise_source}, sort_keys=True) + "\n"


def parse_lines(text: str, path: str | Path = "<site ledger>") -> list[SiteRelease]:
    """The releases of a ledger file's text; :class:`SiteLedgerError` on the first bad line."""
    entries = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if number == len(lines):  # the text does not end with a newline: a torn last write
            raise SiteLedgerError(f"site ledger {path}: line {number} is incomplete (the node stopped while "
                                  "writing it, so that release never left the site); check the file and "
                                  "remove that line to continue")
        try:
            row = json.loads(line)
            if row.get("format") != FORMAT:
                raise ValueError(f"format {row.get('format')!r} != {FORMAT!r}")
            release = GaussianRelease(client=int(row["client"]), round=int(row["round"]),
                                      sensitivity=float(row["sensitivity"]), sigma=float(row["sigma"]),
                                      neighbouring=row["neighbouring"], mechanism=str(row["mechanism"]))
            entries.append(SiteRelease(int(row["run"]), release, str(row["noise"]), str(row.get("scenario", "")),
                                       str(row.get("time", ""))))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise SiteLedgerError(f"site ledger {path}: line {number} is corrupt ({reason}); fix or move the file") \
                from None
    return entries


class SiteLedger:
    """The ledger file ``path`` (created with mode 0600, its directory with 0700, when first charged).

    Parameters
    ----------
    path : str or Path
        The JSON-lines file (:meth:`SitePolicy.ledger_path`).
    fsync : callable, optional
        The function that flushes a file descriptor to disk. (default: ``os.fsync``, looked up at
        each call)
    """

    def __init__(self, path: str | Path, fsync: Callable[[int], None] | None = None) -> None:
        self.path = Path(path)
        self._fsync_fn = fsync

    def _fsync(self, fd: int) -> None:
        (self._fsync_fn or os.fsync)(fd)

    def read(self) -> list[SiteRelease]:
        """Every release recorded so far (empty if the file does not exist yet)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SiteLedgerError(f"site ledger {self.path}: {exc.strerror or exc}") from None
        return parse_lines(text, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        created = not self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise SiteLedgerError(f"site ledger {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if created:  # the new file's directory entry must survive a crash too
                try:
                    dir_fd = os.open(self.path.parent, os.O_RDONLY)
                    try:
                        self._fsync(dir_fd)
                    finally:
                        os.close(dir_fd)
                except OSError as exc:
                    raise SiteLedgerError(f"site ledger {self.path}: could not create it "
                                          f"({exc.strerror or exc}); nothing was released") from None
            yield fd
        finally:
            os.close(fd)  # also releases the lock

    def _read_fd(self, fd: int) -> list[SiteRelease]:
        chunks = []
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return parse_lines(b"".join(chunks).decode(), self.path)

    def charge(self, planned: SiteRelease, policy: SitePolicy) -> SiteTotals:
        """Check ``planned`` against ``policy`` and the whole ledger (:func:`check_release`) and append
        it, fsynced, under the file lock; returns the site's totals after it.  A
        :class:`~fdp_flower.privacy.site_policy.SiteRefusal` leaves the file untouched."""
        stamped = SiteRelease(planned.run, planned.release, planned.noise_source, planned.scenario,
                              planned.time or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        with self._locked() as fd:
            history = self._read_fd(fd)
            check_release(history, stamped, policy)
            data = entry_line(stamped).encode()
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write ({written} of {len(data)} bytes)")
                self._fsync(fd)
            except OSError as exc:
                raise SiteLedgerError(f"site ledger {self.path}: could not record the release "
                                      f"({getattr(exc, 'strerror', None) or exc}); nothing was released") from None
            return site_totals([*history, stamped], policy, stamped.run)

    def totals(self, policy: SitePolicy, run: int) -> SiteTotals:
        """The site's totals now (lifetime and run ``run``), without charging anything."""
        return site_totals(self.read(), policy, run)


__all__ = ["FORMAT", "SiteLedger", "SiteLedgerError", "entry_line", "parse_lines"]
