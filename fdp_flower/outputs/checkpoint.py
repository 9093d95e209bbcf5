"""Atomic checkpoints of a run: state arrays, privacy ledger, history, failures, round.

One ``.npz`` file holds the state arrays and a JSON document with everything
else.  It is written to a temporary file in the same directory, flushed to disk
and moved over the old checkpoint with ``os.replace``, so a crash leaves either
the previous checkpoint or the new one, never a torn file.

No generator positions are stored because none exist: the release noise of
(client, round) comes from ``release_rng(seed, client, round)`` and the
injected failures of a round from ``draw_failures(seed, round, ...)``, so
resuming after round r and running rounds r+1.. draws exactly what an
uninterrupted run draws (with ``privacy.noise_source: seeded``).
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.faults import FailureRecord
from fdp_flower.algorithms.fdp_admm.config import Scenario, parse_scenario
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.outputs.layout import CHECKPOINT_FILE
from fdp_flower.privacy import PrivacyLedger

FORMAT = "fdp-flower-checkpoint/1"
CHECKPOINT_NAME = CHECKPOINT_FILE


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not belong to the scenario; one-line message."""


@dataclass
class Checkpoint:
    """A run after ``state.round`` completed rounds."""

    scenario: Scenario
    state: FDPADMMState
    ledger: PrivacyLedger
    history: list[dict] = field(default_factory=list)
    failures: list[FailureRecord] = field(default_factory=list)
    engine: str = "inprocess"
    #: the server rule's own state beyond ``state`` (JSON; the Newton rule's, :meth:`~fdp_flower.algorithms.
    #: fdp_admm.newton_protocol.NewtonServer.checkpoint_state`), None under the ADMM rule
    server_state: dict | None = None

    @property
    def round(self) -> int:
        return self.state.round


def write_checkpoint(path: str | Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` atomically to ``path`` (parent created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": FORMAT,
        "engine": checkpoint.engine,
        "round": checkpoint.round,
        "scenario": checkpoint.scenario.model_dump(mode="json"),
        "history": checkpoint.history,
        "ledger": checkpoint.ledger.to_rows(),
        "failures": [f.to_row() for f in checkpoint.failures],
    }
    if checkpoint.server_state is not None:
        meta["server_state"] = checkpoint.server_state
    arrays = {f"state_{k}": v for k, v in checkpoint.state.to_arrays().items()}
    # json keeps floats exactly (repr round-trips); NaN/inf are written as NaN/Infinity tokens
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def resolve_checkpoint_path(path: str | Path) -> Path:
    """A checkpoint file, or a results directory holding ``checkpoint.npz``."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint found")
    return path


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint written by :func:`write_checkpoint` (file or results directory)."""
    path = resolve_checkpoint_path(path)
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:  # closed even when corrupt
            meta = json.loads(bytes(data["meta"]).decode())
            state = FDPADMMState.from_arrays({k[len("state_"):]: data[k] for k in data.files
                                              if k.startswith("state_")})
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        what = "empty" if path.stat().st_size == 0 else "truncated or not a checkpoint"
        raise CheckpointError(f"{path}: unreadable checkpoint ({what}: {type(exc).__name__})") from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {meta.get('format')!r}")
    return Checkpoint(
        scenario=parse_scenario(meta["scenario"], f"{path} (scenario)"),
        state=state,
        ledger=PrivacyLedger.from_rows(meta["ledger"]),
        history=meta["history"],
        failures=[FailureRecord(int(r["round"]), int(r["client"]), str(r["reason"]), bool(r["charged"]))
                  for r in meta["failures"]],
        engine=str(meta.get("engine", "inprocess")),
        server_state=meta.get("server_state"),
    )


def check_resumable(checkpoint: Checkpoint, scenario: Scenario) -> None:
    """Refuse to resume ``scenario`` from a checkpoint of a different run (output settings may differ)."""
    a = checkpoint.scenario.model_dump(mode="json", exclude={"output"})
    b = scenario.model_dump(mode="json", exclude={"output"})
    if a != b:
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        raise CheckpointError(f"the checkpoint belongs to another scenario (sections differ: {', '.join(diff)})")
    from fdp_flower.algorithms.fdp_admm.plan import planned_rounds

    rounds = planned_rounds(scenario) if getattr(scenario.algorithm, "kind", None) == "fdp_admm" \
        else scenario.algorithm.rounds
    if checkpoint.round > rounds:
        raise CheckpointError(f"the checkpoint is at round {checkpoint.round}, beyond the scenario's "
                              f"{rounds} rounds")
