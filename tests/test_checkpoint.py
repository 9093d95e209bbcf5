"""Checkpoints: atomic writes, and `fdp-flower run --resume` after a crash gives the results of an
uninterrupted run, file for file; reproducibility of seeds and the OS-entropy noise option."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from fdp_flower import cli
from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.engines import inprocess
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.outputs.checkpoint import (
    Checkpoint,
    CheckpointError,
    check_resumable,
    read_checkpoint,
    write_checkpoint,
)
from fdp_flower.privacy.mechanisms import release_rng

SCENARIO = {"name": "ckpt", "seed": 3, "data": {"n_samples": 800, "grid_points": 21},
            "federation": {"num_clients": 3}, "basis": {"kind": "fixed", "n_components": 4},
            "algorithm": {"rounds": 7}, "faults": {"failure_rate": 0.3, "quorum": 0.3},
            "output": {"checkpoint_every": 3}}
# total mode: the resumed run's budget guard must see the restored ledger (constant schedule: fast)
TOTAL = {"privacy": {"mode": "total", "eps": 2.0}}


def _files(d):
    out = {n: (d / n).read_text() for n in ("history.csv", "ledger.csv", "failures.csv", "scenario.yaml")}
    summary = json.loads((d / "summary.json").read_text())
    out["summary"] = summary
    with np.load(d / "final.npz") as z:
        out["final"] = {k: z[k].tolist() for k in z.files}
    return out


class Crash(Exception):
    pass


def _crash_during_round_7(monkeypatch):
    """Make the in-process engine die during round 7, as a killed process would (last checkpoint: round 6);
    returns the real engine."""
    real = inprocess.run_fdp_admm

    def crashing(scenario, **kw):
        def progress(round_, row):
            if round_ == 7:
                raise Crash
        return real(scenario, **{**kw, "progress": progress})

    monkeypatch.setattr(inprocess, "run_fdp_admm", crashing)
    return real


def test_resume_after_crash_equals_uninterrupted_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**SCENARIO, **TOTAL}))
    assert cli.main(["run", "s.yaml", "--out", "full"]) == 0
    full = _files(tmp_path / "full")
    assert full["summary"]["stop_reason"] == "completed" and full["summary"]["failures"]["count"] > 0

    real = _crash_during_round_7(monkeypatch)
    with pytest.raises(Crash):
        cli.main(["run", "s.yaml", "--out", "part"])
    ck = read_checkpoint(tmp_path / "part")
    assert ck.round == 6 and len(ck.history) == 6
    assert {r.round for r in ck.ledger.releases} == set(range(1, 7))
    monkeypatch.setattr(inprocess, "run_fdp_admm", real)
    assert cli.main(["run", "--resume", "part"]) == 0
    assert "after round 6" in capsys.readouterr().out
    assert _files(tmp_path / "part") == full


def test_resume_refuses_another_scenario(tmp_path):
    sc = parse_scenario(SCENARIO)
    res = run_fdp_admm(sc, with_reference=False, stop_after=2, checkpoint_path=tmp_path / "c.npz")
    ck = read_checkpoint(tmp_path / "c.npz")
    assert ck.round == 2 and ck.ledger.to_rows() == res.ledger.to_rows()
    other = parse_scenario({**SCENARIO, "seed": 6})
    with pytest.raises(CheckpointError, match="another scenario .*seed"):
        check_resumable(ck, other)
    check_resumable(ck, parse_scenario({**SCENARIO, "output": {"checkpoint_every": 1}}))  # output may differ


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    sc = parse_scenario(SCENARIO)
    res = run_fdp_admm(sc, with_reference=False, stop_after=2)
    path = tmp_path / "checkpoint.npz"
    write_checkpoint(path, Checkpoint(sc, res.state, res.ledger, res.history, res.failures))
    before = path.read_bytes()

    def torn(fh, **arrays):
        fh.write(b"PK partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", torn)
    res3 = run_fdp_admm(sc, with_reference=False, stop_after=3)
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(path, Checkpoint(sc, res3.state, res3.ledger, res3.history, res3.failures))
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="unreadable checkpoint"):
        read_checkpoint(tmp_path / "bad.npz")


# ------------------------------------------------------------------ reproducibility and noise source
def test_same_seed_same_results_different_seed_different_noise():
    small = {**SCENARIO, "algorithm": {"rounds": 3}}
    a = run_fdp_admm(parse_scenario(small), with_reference=False)
    b = run_fdp_admm(parse_scenario(small), with_reference=False)
    np.testing.assert_array_equal(a.state.noisy_primals, b.state.noisy_primals)
    assert a.history == b.history and a.ledger.to_rows() == b.ledger.to_rows()
    # the data depend on the seed too, so compare the noise itself: same generator key -> same draws
    np.testing.assert_array_equal(release_rng(5, 1, 2).standard_normal(4), release_rng(5, 1, 2).standard_normal(4))
    for other in (release_rng(6, 1, 2), release_rng(5, 2, 2), release_rng(5, 1, 3)):
        assert not np.allclose(other.standard_normal(4), release_rng(5, 1, 2).standard_normal(4))


def test_os_entropy_noise_is_not_reproducible_but_keeps_the_calibration():
    draws = [release_rng(5, 1, 2, "os_entropy").standard_normal(3) for _ in range(2)]
    assert not np.allclose(*draws)
    with pytest.raises(ValueError, match="noise source must be one of"):
        release_rng(5, 1, 2, "urandom")
    small = {**SCENARIO, "algorithm": {"rounds": 3}, "faults": {}}
    seeded = run_fdp_admm(parse_scenario(small), with_reference=False)
    crypto = [run_fdp_admm(parse_scenario({**small, "privacy": {"noise_source": "os_entropy"}}),
                           with_reference=False) for _ in range(2)]
    assert not np.allclose(crypto[0].state.noisy_primals, crypto[1].state.noisy_primals)
    assert not np.allclose(crypto[0].state.noisy_primals, seeded.state.noisy_primals)
    assert crypto[0].ledger.to_rows() == seeded.ledger.to_rows()  # same sigma, same privacy


def test_a_resume_with_os_entropy_noise_charges_every_release_the_crashed_run_made(tmp_path, monkeypatch, capsys):
    """Crash in round 7 after its releases (last checkpoint: round 6): the resumed run draws new OS-entropy
    noise for round 7, so the ledger holds both round-7 releases -- 8 per client for 7 rounds -- and the
    reported eps is the PLD eps of all of them."""
    from fdp_flower.privacy.ledger import pld_epsilon

    monkeypatch.chdir(tmp_path)
    sc = {**SCENARIO, "faults": {"failure_rate": 0.0}, "privacy": {"mode": "per_round", "eps": 1.0,
                                                                  "noise_source": "os_entropy"}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    real = _crash_during_round_7(monkeypatch)
    with pytest.raises(Crash):
        cli.main(["run", "s.yaml", "--out", "part"])
    assert read_checkpoint(tmp_path / "part").round == 6
    monkeypatch.setattr(inprocess, "run_fdp_admm", real)
    assert cli.main(["run", "--resume", "part", "--out", "resumed"]) == 0
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    ledger = read_checkpoint(tmp_path / "resumed").ledger
    for client in range(3):
        assert sorted(r.round for r in ledger.of_client(client)) == [1, 2, 3, 4, 5, 6, 7, 7]
    privacy = summary["privacy"]
    assert privacy["releases"] == 8
    assert privacy["eps"] == pytest.approx(pld_epsilon(ledger.of_client(privacy["worst_client"]), 1e-5), rel=1e-12)
    assert privacy["eps"] > pld_epsilon(ledger.of_client(privacy["worst_client"])[:7], 1e-5)
    assert "eps = " in capsys.readouterr().out
