"""Which app a site runs: the digests of a Flower App Bundle (FAB) and the site's pins.

The server ships the ClientApp's code to every SuperNode as a FAB (a zip of the app's files, built
by ``flwr build`` / ``flwr run``); a site that runs whatever arrives runs whatever the server wants
on its data.  A site therefore *pins* the apps it approved and refuses every other FAB before any
of its code is imported (:mod:`fdp_flower.clients.site_launcher` does the refusing; this module is
the pure part: no Flower, no import of the FAB's code, nothing extracted to disk).

Two digests name a FAB (``fdp-flower fab-hash`` prints both):

- ``sha256:<64 hex>``: the SHA-256 of the FAB's bytes, what Flower calls the FAB hash (``flwr run``
  prints its first 8 characters; the SuperNode installs an app under them).  ``flwr build`` is
  deterministic (fixed file dates, sorted names), so the same files and the same Flower version
  give the same bytes -- but the bytes also depend on the zlib that compressed them;
- ``files-sha256:<64 hex>``: the SHA-256 of the sorted list of (file name, SHA-256 of its content)
  of every file the FAB installs (every member except the ``.info/`` manifest): the same for the
  same files however they were compressed, so a site can compute it from the source it reviewed.

A pin file (``--allow-list``) holds one pin per line; ``#`` starts a comment.
"""
from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PIN_KINDS = ("sha256", "files-sha256")
_PIN = re.compile(r"^(sha256|files-sha256):([0-9a-f]{64})$")
#: The most a FAB may unpack to while its digest is computed (Flower caps the zip itself at 10 MB).
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
#: Members of a FAB that describe it rather than being installed (Flower removes ``.info/`` on install).
INFO_PREFIX = ".info/"


class FabRefused(RuntimeError):
    """The site refuses an app bundle (one line); none of its code has been imported."""


@dataclass(frozen=True)
class Pin:
    """One approved app: ``kind`` (``sha256`` or ``files-sha256``) and its 64 hex digits."""

    kind: str
    digest: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.digest}"


def parse_pin(text: str, where: str = "pin") -> Pin:
    """``sha256:<64 hex>`` or ``files-sha256:<64 hex>`` (one-line ``ValueError`` naming ``where``)."""
    found = _PIN.match(str(text).strip().lower())
    if not found:
        raise ValueError(f"{where}: {text!r} is not a pin: expected sha256:<64 hex digits> or "
                         "files-sha256:<64 hex digits> (fdp-flower fab-hash prints both)")
    return Pin(found.group(1), found.group(2))


def read_allow_list(path: str | Path) -> list[Pin]:
    """The pins of an allow-list file: one per line, ``#`` comments and blank lines ignored."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"allow-list {path}: {exc.strerror or exc}") from None
    pins = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if line:
            pins.append(parse_pin(line, f"allow-list {path}, line {number}"))
    return pins


@dataclass(frozen=True)
class FabDigests:
    """The two digests of one FAB and the files it would install (name, SHA-256, size)."""

    sha256: str
    files_sha256: str
    files: tuple[tuple[str, str, int], ...]

    @property
    def pins(self) -> tuple[Pin, Pin]:
        return Pin("sha256", self.sha256), Pin("files-sha256", self.files_sha256)

    def matches(self, pins: Iterable[Pin]) -> Pin | None:
        """The first of ``pins`` naming this FAB, or None."""
        mine = set(self.pins)
        return next((p for p in pins if p in mine), None)


def files_digest(files: Iterable[tuple[str, str]]) -> str:
    """``files-sha256`` of (name, content SHA-256 hex) pairs: SHA-256 of the sorted ``name\\tsha\\n`` lines."""
    lines = sorted(f"{name}\t{sha}\n" for name, sha in files)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def fab_digests(content: bytes) -> FabDigests:
    """Both digests of a FAB's bytes, read in memory (nothing is extracted, no code imported).

    One-line :class:`FabRefused` for bytes that are not a FAB a site could pin: not a zip, a member
    named twice, an absolute or ``..`` name, more than :data:`MAX_UNPACKED_BYTES` unpacked, or a
    member whose content does not match its checksum.
    """
    total = 0
    files = []
    seen: set[str] = set()
    try:
        with zipfile.ZipFile(io.BytesIO(content)) as archive:
            for info in archive.infolist():
                name = info.filename
                if name in seen:
                    raise FabRefused(f"the app bundle names {name!r} twice")
                seen.add(name)
                if name.startswith("/") or ".." in Path(name).parts or "\\" in name:
                    raise FabRefused(f"the app bundle holds a file outside the app: {name!r}")
                if info.is_dir() or name.startswith(INFO_PREFIX):
                    continue
                digest = hashlib.sha256()
                with archive.open(info) as member:
                    while chunk := member.read(1 << 20):
                        total += len(chunk)
                        if total > MAX_UNPACKED_BYTES:
                            raise FabRefused(f"the app bundle unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                        digest.update(chunk)
                files.append((name, digest.hexdigest(), info.file_size))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise FabRefused(f"the app bundle is not a readable zip ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None
    return FabDigests(hashlib.sha256(content).hexdigest(), files_digest((n, s) for n, s, _ in files),
                      tuple(sorted(files)))


def check_fab(content: bytes, claimed_hash: str, pins: Sequence[Pin]) -> tuple[FabDigests, Pin]:
    """Approve a FAB the SuperNode received, or refuse it (:class:`FabRefused`, one line).

    ``claimed_hash`` is the hash the SuperLink announced for it (Flower installs and loads the app under
    that name, so it must be the bytes' own); ``pins`` the site's approved apps (an empty list approves
    nothing).  Returns the digests and the pin that approved it.
    """
    if not pins:
        raise FabRefused("the site approved no app (give --pin or --allow-list): every app bundle is refused")
    digests = fab_digests(content)
    if str(claimed_hash) != digests.sha256:
        raise FabRefused(f"the app bundle's bytes hash to sha256:{digests.sha256}, but the SuperLink announced "
                         f"{claimed_hash!r}: refused")
    pin = digests.matches(pins)
    if pin is None:
        raise FabRefused(f"the site refuses app bundle sha256:{digests.sha256} (files-sha256:{digests.files_sha256}): "
                         f"it is not one of the {len(pins)} app(s) this site approved")
    return digests, pin


__all__ = ["FabDigests", "FabRefused", "INFO_PREFIX", "MAX_UNPACKED_BYTES", "PIN_KINDS", "Pin", "check_fab",
           "fab_digests", "files_digest", "parse_pin", "read_allow_list"]
