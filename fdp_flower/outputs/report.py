"""Markdown reports of sweep results, in Zhou & Xiang's (2022) table layout with its numbers beside ours."""
from __future__ import annotations

import json
import math
from pathlib import Path

from fdp_flower.outputs import paper_tables
from fdp_flower.outputs.layout import ResultsDir

_ESTIMATORS = {"final": "final iterate w^L", "average": "running average wbar^L",
               "scenario": "estimator of each configuration's algorithm.estimator"}


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def _find(configs: list[dict], eps, delta, tau) -> dict | None:
    for c in configs:
        if abs(c["tau"] - tau) > 1e-9:
            continue
        if eps is None and not c["private"]:
            return c
        if eps is not None and c["private"] and abs(c["eps"] - eps) < 1e-12 \
                and abs(c["delta"] - delta) / delta < 1e-9:
            return c
    return None


def paper_table_markdown(summary: dict, table: int | None = None) -> tuple[str, dict]:
    """The paper's layout (rows eps x delta, then eps = infinity; columns tau); each cell
    ``ours (paper)``, bold when ours is at or below the paper's.  Returns (markdown, counts)."""
    table = table or summary.get("paper_table")
    if table is None:
        raise ValueError("this sweep names no paper table (sweep.paper_table)")
    penalty, m = paper_tables.SETTINGS[table]
    configs = summary["configs"]
    lines = [f"### Table {table}: MISE, {penalty}-penalized quantile regression, M = {m}",
             "",
             (f"Ours = mean over {summary['repetitions']} repetitions of the MISE of the "
              f"{_ESTIMATORS.get(summary['estimator'], summary['estimator'])}"
              f" (± standard error); paper in parentheses; **bold**: ours <= paper."),
             "",
             "| eps | delta | " + " | ".join(f"tau = {t:g}" for t in paper_tables.TAUS) + " |",
             "|---|---|" + "---|" * len(paper_tables.TAUS)]
    counts = {"cells": 0, "at_or_below": 0, "missing": 0, "above": []}
    for i, (eps, delta) in enumerate(paper_tables.ROWS):
        cells = []
        for j, tau in enumerate(paper_tables.TAUS):
            paper = paper_tables.MISE[table][i][j]
            c = _find(configs, eps, delta, tau)
            if c is None:
                counts["missing"] += 1
                cells.append(f"- ({paper})")
                continue
            counts["cells"] += 1
            ours = c["mise_mean"]
            ok = ours <= paper
            counts["at_or_below"] += int(ok)
            if not ok:
                counts["above"].append({"eps": eps, "delta": delta, "tau": tau, "ours": ours, "paper": paper})
            text = f"{_fmt(ours)} ± {_fmt(c['mise_se'])} ({paper})"
            cells.append(f"**{text}**" if ok else text)
        e = "∞" if eps is None else f"{eps:g}"
        d = "-" if delta is None else f"1e{round(math.log10(delta))}"
        lines.append(f"| {e} | {d} | " + " | ".join(cells) + " |")
    lines += ["", f"{counts['at_or_below']} of {counts['cells']} cells at or below the paper's MISE"
              + (f"; {counts['missing']} cells not run" if counts["missing"] else "") + "."]
    return "\n".join(lines), counts


def generic_markdown(summary: dict) -> str:
    configs = summary["configs"]
    keys = sorted({k for c in configs for k in c["labels"]})
    lines = [(f"### {summary['name']}: MISE ({summary['estimator']} estimate, "
              f"{summary['repetitions']} repetitions)"), "",
             "| config | " + " | ".join(keys) + " | MISE mean | std | se | eps whole run (PLD, replace-one) |",
             "|---|" + "---|" * (len(keys) + 4)]
    for c in configs:
        lines.append(f"| {c['config']} | " + " | ".join(str(c["labels"].get(k, "")) for k in keys)
                     + f" | {_fmt(c['mise_mean'])} | {_fmt(c['mise_std'])} | {_fmt(c['mise_se'])} | "
                     + f"{_fmt(c.get('eps_pld_whole_run'), 2)} |")
    return "\n".join(lines)


def report(results_dir: str | Path) -> tuple[str, dict | None]:
    """Markdown for a sweep results directory (summary.json); counts when it is a paper table."""
    results_dir = Path(results_dir)
    summary_path = ResultsDir.at(results_dir).summary
    if not summary_path.is_file():
        raise ValueError(f"{results_dir}: no summary.json (not a results directory of fdp-flower sweep)")
    summary = json.loads(summary_path.read_text())
    if "configs" not in summary:
        raise ValueError(f"{summary_path}: not a sweep summary (run `fdp-flower sweep` first)")
    header = [f"# {summary['name']}", "",
              (f"{summary['runs']} runs ({len(summary['configs'])} configurations x {summary['repetitions']} "
               f"repetitions), engine {summary['engine']}, {summary['workers']} worker(s), "
               f"{summary['elapsed_seconds']:.0f} s."), ""]
    if summary.get("paper_table"):
        body, counts = paper_table_markdown(summary)
        return "\n".join(header) + "\n" + body + "\n", counts
    return "\n".join(header) + "\n" + generic_markdown(summary) + "\n", None
