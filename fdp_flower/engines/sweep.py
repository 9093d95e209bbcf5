"""Sweeps: a base scenario, a grid of overrides and repetitions, run fast and summarised.

A sweep file is a scenario file with one more top-level section::

    name: paper_table1
    seed: 1000
    ...                       # any scenario fields (the base configuration)
    sweep:
      repetitions: 100        # repetition r runs with seed = seed + r * seed_stride
      grid:                   # cartesian product of dotted fields
        model.loss.tau: [0.1, 0.25, 0.5, 0.75, 0.9]
      cases:                  # alternatives, each a set of overrides (product with grid)
        - {privacy.eps: 0.1, privacy.delta: 1.0e-6}
        - {privacy.enabled: false}
      estimator: final        # final (w^L, the paper's output) or average (wbar^L)

Every configuration x repetition is a complete :class:`~fdp_flower.algorithms.fdp_admm.config.Scenario`
(validated when the file is loaded, so a typo names the file, the case and the field).
Configurations of one repetition share their seed, hence their data and their noise
draws (common random numbers), and run together on the batched engine
(:mod:`fdp_flower.engines.batched`); repetitions run in parallel worker processes.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fdp_flower.algorithms.fdp_admm.config import Scenario, parse_scenario
from fdp_flower.config.base import ScenarioError, _format_error, apply_overrides
from fdp_flower.outputs.layout import ResultsDir

__all__ = [
    "SweepConfig",
    "SweepResult",
    "SweepSpec",
    "load_sweep",
    "parse_sweep",
    "run_sweep",
    "write_sweep_results",
]


class SweepConfig(BaseModel):
    """The ``sweep:`` section of a sweep file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repetitions: int = Field(1, ge=1, le=100_000, description="runs of every configuration, with seeds "
                                                             "seed + r * seed_stride, r = 0..repetitions-1")
    seed_stride: int = Field(1, ge=1, le=2**32, description="seed step between repetitions")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted field -> values; the "
                                                                         "configurations are their cartesian product")
    cases: list[dict[str, Any]] = Field(default_factory=list, max_length=10_000,
                                        description="alternative override sets (dotted field -> value), "
                                                    "combined with every grid point; empty: one case")
    estimator: Literal["final", "average", "scenario"] = Field(
        "final", description="the estimate summarised: final = w^L (Zhou & Xiang's (2022) output), "
                             "average = wbar^L = (1/L) sum_l w^l, scenario = each configuration's "
                             "algorithm.estimator (all post-processing, free)")
    engine: Literal["batched", "inprocess"] = Field(
        "batched", description="batched: configurations sharing data advance together "
                               "(fdp_flower.engines.batched; algorithm.rule newton runs and private runs with "
                               "algorithm.level_calibration go one by one through "
                               "run_fdp_admm); inprocess: one run_fdp_admm per run")
    workers: int | None = Field(None, ge=1, le=256, description="worker processes (null: the CPU count, "
                                                                "at most the number of repetitions)")
    history: bool = Field(True, description="keep per-round MISE and privacy spent (mean over repetitions)")
    paper_table: int | None = Field(None, ge=1, le=6, description="Zhou & Xiang's (2022) table this sweep reproduces "
                                                                   "(fdp-flower report puts its numbers beside ours)")

    @field_validator("grid")
    @classmethod
    def _grid(cls, grid):
        for key, values in grid.items():
            if not key or any(not part for part in key.split(".")):
                raise ValueError(f"grid key {key!r} must be a dotted field path like privacy.eps")
            if not values:
                raise ValueError(f"grid {key}: give at least one value")
        total = math.prod(len(v) for v in grid.values()) if grid else 1
        if total > 100_000:
            raise ValueError(f"the grid has {total} points (at most 100000)")
        return grid

    @field_validator("cases")
    @classmethod
    def _cases(cls, cases):
        for i, case in enumerate(cases):
            for key in case:
                if not key or any(not part for part in key.split(".")):
                    raise ValueError(f"case {i}: key {key!r} must be a dotted field path like privacy.eps")
        return cases


@dataclass(frozen=True)
class SweepSpec:
    """A loaded sweep: base scenario, sweep section, configurations (label, scenario at seed r = 0)."""

    base: Scenario
    sweep: SweepConfig
    configs: tuple[tuple[dict[str, Any], Scenario], ...]
    source: str = "<sweep>"

    def runs(self) -> list[tuple[int, int, Scenario]]:
        """(config index, repetition, scenario) of every run, repetition-major."""
        out = []
        for r in range(self.sweep.repetitions):
            for c, (_, sc) in enumerate(self.configs):
                seed = self.base.seed + r * self.sweep.seed_stride
                out.append((c, r, sc.model_copy(update={"seed": seed, "name": f"{self.base.name}-c{c}-r{r}"})))
        return out


def _labels(grid_point: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    return {**grid_point, **case}


def parse_sweep(data: dict[str, Any], source: str = "<sweep>", overrides: list[str] | None = None) -> SweepSpec:
    """Validate a sweep mapping (scenario fields + ``sweep:``); errors are one line naming the field."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a sweep file must be a mapping, got {type(data).__name__}")
    if overrides:
        data = apply_overrides(data, overrides)
    data = dict(data)
    raw_sweep = data.pop("sweep", None) or {}
    try:
        sweep = SweepConfig.model_validate(raw_sweep)
    except ValidationError as exc:
        raise ScenarioError(_format_error(source, exc).replace(f"{source}: ", f"{source}: sweep.", 1)) from None
    base = parse_scenario(data, source)
    keys = list(sweep.grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(sweep.grid[k] for k in keys))]
    configs = []
    for point in points:
        for case in sweep.cases or [{}]:
            labels = _labels(point, case)
            where = f"{source} (sweep {', '.join(f'{k}={v}' for k, v in labels.items()) or 'base'})"
            configs.append((labels, parse_scenario(apply_overrides(data, labels), where)))
    return SweepSpec(base, sweep, tuple(configs), source)


def load_sweep(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    """Read a sweep file (a scenario file with a ``sweep:`` section; without one, a
    single configuration).  ``overrides`` are ``a.b=value`` (``sweep.repetitions=5`` too)."""
    from fdp_flower.config.base import _split_override, read_yaml_file

    data = read_yaml_file(path, "sweep")
    if overrides:
        parsed = dict(_split_override(o) for o in overrides)
        data = apply_overrides(data, parsed)
    return parse_sweep(data, str(path))


# ---------------------------------------------------------------------------------------- running
@dataclass
class SweepResult:
    """Per-run final metrics and, optionally, per-round histories."""

    spec: SweepSpec
    runs: list[dict]  # one per (config, repetition)
    histories: dict[int, dict[str, np.ndarray]]  # config -> column -> (R, L) array
    elapsed_seconds: float
    workers: int


def _limit_threads() -> None:
    """One BLAS thread per worker: with 2 shared cores, oversubscribed OpenBLAS threads are
    20-100x slower on these small matrices."""
    with contextlib.suppress(ImportError):  # threadpoolctl comes with scikit-learn
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)


_HIST_COLUMNS = ("mise", "mise_avg", "mise_estimate", "eps_pld", "eps_zcdp", "empirical_loss", "objective")


def _compact(final: dict, history: list[dict]) -> tuple[dict, dict[str, np.ndarray]]:
    cols = {k: np.array([row.get(k, np.nan) for row in history], dtype=float) for k in _HIST_COLUMNS
            if history and any(k in row for row in history)}
    return dict(final), cols


def _stack_held(columns: list[np.ndarray]) -> np.ndarray:
    """(R, L) from the repetitions' columns; a run that the stopping rule ended early (privacy off,
    ``algorithm.stopping``) holds its last values, since its model no longer changes."""
    length = max(len(v) for v in columns)
    return np.vstack([np.pad(v, (0, length - len(v)), mode="edge") if 0 < len(v) < length else v for v in columns])


def _run_unit(unit: list[Scenario], engine: str, history: bool,
              plan_cache: dict | None = None) -> list[tuple[dict, dict]]:
    """Run the scenarios of one unit (whole data groups for batched, which then share one
    noise-plan cache; single runs for inprocess)."""
    _limit_threads()
    out: dict[int, tuple[dict, dict]] = {}
    # the Newton rule's runs go one by one through the in-process engine (the batched engine is the ADMM rule's)
    alone = [i for i, sc in enumerate(unit) if engine != "batched" or getattr(sc.algorithm, "rule", "admm") != "admm"
             or (getattr(sc.algorithm, "level_calibration", False) and sc.privacy.enabled)]
    together = [i for i in range(len(unit)) if i not in set(alone)]
    if together:
        from fdp_flower.engines.batched import run_batched

        results = run_batched([unit[i] for i in together], history=history,
                              plan_cache={} if plan_cache is None else plan_cache)
        out.update({i: _compact(r.final, r.history) for i, r in zip(together, results)})
    if alone:
        from fdp_flower.engines.inprocess import run_fdp_admm

        for i in alone:
            res = run_fdp_admm(unit[i], with_reference=False)
            out[i] = _compact(res.history[-1], res.history if history else [])
    return [out[i] for i in range(len(unit))]


#: Finished runs of a sweep, one JSON line each, appended as they complete (``--resume`` reads it).
PARTIAL_NAME = "runs.partial.jsonl"


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the pool), not each worker's."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _sigint_as_flag():
    """While a process pool runs, Ctrl-C sets the yielded event instead of raising KeyboardInterrupt wherever the
    main thread happens to be: raised inside concurrent.futures' lock sections (``with waiter.lock`` in its
    waits), it could leave a lock held, and the pool's result thread and the shutdown would then wait on it
    forever.  The caller checks the event between waits and raises KeyboardInterrupt itself.  Only when Python's
    default handler is installed (in the main thread); a process that ignores SIGINT keeps ignoring it."""
    import signal
    import threading

    interrupted = threading.Event()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


class _PartialRuns:
    """The append-only file of finished runs in a sweep's results directory.

    Each line is ``{"run": index, "final": {...}, "history": {column: [...]}}``; a line cut by a
    crash is ignored.  ``sweep.yaml`` next to it identifies the sweep, so a resume of another
    sweep is refused.
    """

    def __init__(self, out_dir: str | Path, spec: SweepSpec, resume: bool):
        self.dir = Path(out_dir)
        self.path = self.dir / PARTIAL_NAME
        spec_text = sweep_to_yaml(spec)
        self.done: dict[int, tuple[dict, dict]] = {}
        if resume:
            previous = self.dir / "sweep.yaml"
            if not previous.is_file():
                raise ScenarioError(f"sweep --resume: {self.dir} holds no sweep to continue (no sweep.yaml)")
            if previous.read_text() != spec_text:
                raise ScenarioError(f"sweep --resume: {previous} is another sweep (fields or --set differ); "
                                    "resume with the same file and overrides, or drop --resume")
            if self.path.is_file():
                for line in self.path.read_text().splitlines():
                    try:
                        row = json.loads(line)
                        self.done[int(row["run"])] = (dict(row["final"]),
                                                      {k: np.asarray(v, dtype=float) for k, v in row["history"].items()})
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut by an interruption
        else:
            self.path.unlink(missing_ok=True)
        (self.dir / "sweep.yaml").write_text(spec_text)

    def add(self, indices, results) -> None:
        with open(self.path, "a") as fh:
            for idx, (final, cols) in zip(indices, results):
                fh.write(json.dumps({"run": int(idx), "final": final,
                                     "history": {k: np.asarray(v, dtype=float).tolist() for k, v in cols.items()}})
                         + "\n")
                self.done[int(idx)] = (final, cols)
            fh.flush()
            os.fsync(fh.fileno())


def run_sweep(spec: SweepSpec, *, workers: int | None = None, progress: bool = True,
              callback: Callable[[int], None] | None = None, out_dir: str | Path | None = None,
              resume: bool = False) -> SweepResult:
    """Run every configuration x repetition.  Deterministic: the results depend only on the
    spec (seeds), not on ``workers``.

    ``out_dir``: every finished run is appended to ``<out_dir>/runs.partial.jsonl`` as it
    completes, so an interrupted sweep keeps them; ``resume=True`` reuses them (same sweep only)
    and runs the rest.
    """
    from fdp_flower.engines.batched import data_key

    t0 = time.perf_counter()
    runs = spec.runs()
    store = None if out_dir is None else _PartialRuns(out_dir, spec, resume)
    units: dict[str, list[int]] = {}
    for idx, (_, _, sc) in enumerate(runs):
        key = data_key(sc) if spec.sweep.engine == "batched" else str(idx)
        units.setdefault(key, []).append(idx)
    outputs: dict[int, tuple[dict, dict]] = {}
    if store is not None and store.done:
        outputs.update({i: res for i, res in store.done.items() if 0 <= i < len(runs)})
    groups = [g for g in units.values() if not all(i in outputs for i in g)]
    n_workers = workers or spec.sweep.workers or min(os.cpu_count() or 1, max(1, len(groups)))
    n_workers = max(1, min(n_workers, max(1, len(groups))))
    # a few tasks per worker: each task runs several data groups (repetitions) so that the
    # noise plans are computed once per task, and the progress bar still moves
    per_task = max(1, math.ceil(len(groups) / (10 * n_workers))) if n_workers > 1 else 1
    unit_list = [list(itertools.chain.from_iterable(groups[i:i + per_task]))
                 for i in range(0, len(groups), per_task)]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(runs), initial=len(outputs), desc=spec.base.name, unit="run", dynamic_ncols=True)

    def collect(indices, results):
        for idx, res in zip(indices, results):
            outputs[idx] = res
        if store is not None:
            store.add(indices, results)
        if bar is not None:
            bar.update(len(indices))
        if callback is not None:
            callback(len(indices))

    if n_workers == 1:
        _limit_threads()
        cache: dict = {}
        for indices in unit_list:
            collect(indices, _run_unit([runs[i][2] for i in indices], spec.sweep.engine, spec.sweep.history,
                                       cache))
    else:
        from concurrent.futures import FIRST_COMPLETED, wait

        pool = ProcessPoolExecutor(max_workers=n_workers, initializer=_ignore_sigint)
        with _sigint_as_flag() as interrupted:
            try:
                futures = {pool.submit(_run_unit, [runs[i][2] for i in indices], spec.sweep.engine,
                                       spec.sweep.history): indices for indices in unit_list}
                pending = set(futures)
                while pending:  # kept as each unit finishes, in any order
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    for fut in done:
                        collect(futures[fut], fut.result())
                    if interrupted.is_set():
                        raise KeyboardInterrupt
            except BaseException:  # Ctrl-C or a failed unit: stop the workers now, keep what finished
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        pool.shutdown()
    if bar is not None:
        bar.close()
    rows, hist_parts = [], {}
    for idx, (c, r, sc) in enumerate(runs):
        final, cols = outputs[idx]
        labels = spec.configs[c][0]
        column = {"final": "mise", "average": "mise_avg", "scenario": "mise_estimate"}[spec.sweep.estimator]
        est = final.get(column, math.nan)
        rows.append({"config": c, "repetition": r, "seed": sc.seed, **{k: labels[k] for k in labels},
                     "estimate_mise": est, **{k: v for k, v in final.items() if k != "round"},
                     "rounds_completed": int(final.get("round", sc.algorithm.rounds))})  # < rounds: it converged
        for k, v in cols.items():
            hist_parts.setdefault(c, {}).setdefault(k, []).append(v)
    histories = {c: {k: _stack_held(v) for k, v in parts.items()} for c, parts in hist_parts.items()}
    return SweepResult(spec, rows, histories, time.perf_counter() - t0, n_workers)


def summarize_sweep(result: SweepResult) -> dict:
    """Per-configuration mean, standard deviation and standard error of the estimate's MISE."""
    spec = result.spec
    configs = []
    for c, (labels, sc) in enumerate(spec.configs):
        vals = np.array([r["estimate_mise"] for r in result.runs if r["config"] == c], dtype=float)
        eps_total = [r.get("eps_pld") for r in result.runs if r["config"] == c and r.get("eps_pld") is not None]
        n = vals.size
        configs.append({
            "config": c, "labels": labels,
            "tau": sc.model.loss.tau, "penalty": sc.model.penalty.kind, "num_clients": sc.federation.num_clients,
            "private": sc.privacy.enabled, "eps": sc.privacy.eps if sc.privacy.enabled else None,
            "delta": sc.privacy.delta if sc.privacy.enabled else None, "rounds": sc.algorithm.rounds,
            "mode": sc.privacy.mode if sc.privacy.enabled else None,
            "repetitions": int(n), "mise_mean": float(vals.mean()),
            "mise_std": float(vals.std(ddof=1)) if n > 1 else 0.0,
            "mise_se": float(vals.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
            "mise_median": float(np.median(vals)),
            # the whole run's eps per client (worst client), PLD accountant, replace-one neighbours
            "eps_pld_whole_run": float(np.mean(eps_total)) if eps_total else None,
            "accountant": "pld" if eps_total else None,
            "neighbouring": "replace_one" if eps_total else None,
        })
    return {"name": spec.base.name, "source": spec.source, "estimator": spec.sweep.estimator,
            "engine": spec.sweep.engine, "repetitions": spec.sweep.repetitions,
            "paper_table": spec.sweep.paper_table, "elapsed_seconds": result.elapsed_seconds,
            "workers": result.workers, "runs": len(result.runs), "configs": configs}


def sweep_to_yaml(spec: SweepSpec) -> str:
    data = spec.base.model_dump(mode="json")
    data["sweep"] = spec.sweep.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False)


def write_sweep_results(result: SweepResult, out_dir: str | Path, *, plots: bool = True) -> Path:
    """sweep.yaml (resolved), runs.csv, history.csv (mean over repetitions), summary.json, plots."""
    from fdp_flower.outputs.results import _clean, write_csv

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.yaml").write_text(sweep_to_yaml(result.spec))
    write_csv(out / "runs.csv", result.runs)
    (out / PARTIAL_NAME).unlink(missing_ok=True)  # runs.csv now holds every run
    hist_rows = []
    for c, cols in sorted(result.histories.items()):
        n_rounds = next(iter(cols.values())).shape[1]
        for l in range(n_rounds):
            row = {"config": c, "round": l + 1}
            row.update({k: float(np.nanmean(v[:, l])) for k, v in cols.items()})
            hist_rows.append(row)
    if hist_rows:
        write_csv(ResultsDir.at(out).history, hist_rows)
    summary = summarize_sweep(result)
    ResultsDir.at(out).summary.write_text(json.dumps(_clean(summary), indent=2))
    if plots:
        from fdp_flower.outputs import plots as plotting

        plotting.plot_privacy_utility(summary, out / "privacy_utility.png")
        if hist_rows:
            plotting.plot_sweep_convergence(summary, hist_rows, ResultsDir.at(out).convergence_plot)
    return out

