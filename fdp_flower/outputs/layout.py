"""The one layout of a results directory: every writer and reader names its files through :class:`ResultsDir`.

A results directory (``fdp-flower run``, ``flwr run``, ``fdp_flower.fit(..., out=...)``, a sweep cell) holds

=====================  ==============================================================================
``scenario.yaml``      the resolved scenario (the family and every setting; read first)
``summary.json``       stop reason, last metrics, the privacy section (eps, delta, neighbouring relation)
``history.csv``        one row per round (metrics, the accountant's eps so far)
``ledger.csv``         one row per noisy release (client, round, sensitivity, sigma, relation, mechanism)
``failures.csv``       the clients that failed, and in which round
``final.npz``          the released estimate (FDP-ADMM: the state and the basis)
``iterates.npz``       peer-to-peer runs: the released node estimates and duals of every round
``graph.json``         peer-to-peer runs on Flower: the communication graph the relay used
``checkpoint.npz``     FDP-ADMM: the state to ``--resume`` from
``releases-requested.jsonl``  FDP-ADMM: the releases asked of the sites (the resume journal)
``convergence.png``    the run's figure
``model.json``         a saved model (``model.save``): format, class and what is not an array
``model.npz``          a saved model: the estimate, the basis, the inference pieces
=====================  ==============================================================================

Earlier versions of the relay wrote ``history.json`` and ``ledger.json``; :class:`ResultsDir` still reads them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCENARIO_FILE = "scenario.yaml"
SUMMARY_FILE = "summary.json"
HISTORY_FILE = "history.csv"
LEDGER_FILE = "ledger.csv"
FAILURES_FILE = "failures.csv"
FINAL_FILE = "final.npz"
ITERATES_FILE = "iterates.npz"
GRAPH_FILE = "graph.json"
CHECKPOINT_FILE = "checkpoint.npz"
JOURNAL_FILE = "releases-requested.jsonl"
CONVERGENCE_PLOT = "convergence.png"
#: a saved model (``model.save``) is a results directory with these two in place of ``final.npz`` / ``summary.json``
MODEL_META_FILE = "model.json"
MODEL_ARRAYS_FILE = "model.npz"
#: the forms an earlier relay wrote (read, never written)
LEGACY_HISTORY_FILE = "history.json"
LEGACY_LEDGER_FILE = "ledger.json"


@dataclass(frozen=True)
class ResultsDir:
    """The named files of one results directory ``root`` (see the module docstring)."""

    root: Path

    @classmethod
    def at(cls, path: str | Path) -> ResultsDir:
        return cls(Path(path))

    @property
    def scenario(self) -> Path:
        return self.root / SCENARIO_FILE

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY_FILE

    @property
    def history(self) -> Path:
        return self.root / HISTORY_FILE

    @property
    def ledger(self) -> Path:
        return self.root / LEDGER_FILE

    @property
    def failures(self) -> Path:
        return self.root / FAILURES_FILE

    @property
    def final(self) -> Path:
        return self.root / FINAL_FILE

    @property
    def iterates(self) -> Path:
        return self.root / ITERATES_FILE

    @property
    def graph(self) -> Path:
        return self.root / GRAPH_FILE

    @property
    def checkpoint(self) -> Path:
        return self.root / CHECKPOINT_FILE

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL_FILE

    @property
    def model_meta(self) -> Path:
        return self.root / MODEL_META_FILE

    @property
    def model_arrays(self) -> Path:
        return self.root / MODEL_ARRAYS_FILE

    @property
    def convergence_plot(self) -> Path:
        return self.root / CONVERGENCE_PLOT

    def history_to_read(self) -> Path | None:
        """``history.csv``, else an earlier relay's ``history.json``, else None."""
        return next((p for p in (self.history, self.root / LEGACY_HISTORY_FILE) if p.is_file()), None)

    def ledger_to_read(self) -> Path | None:
        """``ledger.csv``, else an earlier relay's ``ledger.json``, else None."""
        return next((p for p in (self.ledger, self.root / LEGACY_LEDGER_FILE) if p.is_file()), None)


__all__ = ["CHECKPOINT_FILE", "CONVERGENCE_PLOT", "FAILURES_FILE", "FINAL_FILE", "GRAPH_FILE", "HISTORY_FILE",
           "ITERATES_FILE", "JOURNAL_FILE", "LEDGER_FILE", "MODEL_ARRAYS_FILE", "MODEL_META_FILE", "ResultsDir", "SCENARIO_FILE", "SUMMARY_FILE"]
