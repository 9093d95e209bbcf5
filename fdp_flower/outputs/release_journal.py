"""The run's journal of requested releases, next to its checkpoint: a resumed run charges every
release that may have left a client after the last checkpoint.

A checkpoint holds the ledger up to its round; releases of later rounds of a run that then
crashed were made (and may have been seen) but are in no checkpoint.  When their noise cannot be
drawn again -- OS entropy, a site's own secret, node-local data -- the resumed run's re-release of
those rounds is a *new* release, so both count.  The journal is one JSON line per planned release,
appended and fsynced **before** the round's noise is drawn or its messages are sent; on resume the
lines of rounds after the checkpoint's are recorded in the resumed ledger (an over-count if the
crash came before the release, never an under-count).  With reproducible (seeded) noise a
re-release repeats the same value and nothing is journaled.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from fdp_flower.outputs.layout import JOURNAL_FILE
from fdp_flower.privacy import GaussianRelease
from fdp_flower.privacy.distributed import SkellamSumRelease

JOURNAL_NAME = JOURNAL_FILE


def journal_path(checkpoint_path: str | Path) -> Path:
    """The journal next to a checkpoint file."""
    return Path(checkpoint_path).with_name(JOURNAL_NAME)


def append_requests(path: str | Path, releases) -> None:
    """Append ``releases`` (one JSON line each) and fsync, before they are made."""
    releases = list(releases)
    if not releases:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r.as_row() if isinstance(r, SkellamSumRelease) else
                              {"client": r.client, "round": r.round, "sensitivity": r.sensitivity, "sigma": r.sigma,
                               "neighbouring": r.neighbouring, "mechanism": r.mechanism}) + "\n" for r in releases)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def releases_after(path: str | Path, round_: int) -> list[GaussianRelease | SkellamSumRelease]:
    """The journaled releases of rounds after ``round_`` (none if there is no journal); a torn last
    line (a crash while it was written: that release was never made) is skipped."""
    try:
        lines = Path(path).read_text().split("\n")
    except FileNotFoundError:
        return []
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            release = SkellamSumRelease.from_row(row) if row.get("mechanism") == SkellamSumRelease.mechanism \
                else GaussianRelease(**row)
        except (ValueError, TypeError) as exc:
            if number == len(lines):  # no newline after it: torn by the crash
                continue
            raise ValueError(f"{path}: line {number} is corrupt ({exc})") from None
        if release.round > round_:
            out.append(release)
    return out


__all__ = ["JOURNAL_NAME", "append_requests", "journal_path", "releases_after"]
