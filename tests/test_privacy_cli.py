"""``fdp-flower privacy``: the calculator prints the ledger and plots eps, without training."""
import argparse
import subprocess
import sys

import pytest

from fdp_flower.cli.privacy import main, register

BASE = ["privacy", "--clients", "3", "--samples", "3000", "--rounds", "6", "--components", "4"]


def table_rows(out):
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["client", "m_i"])
    return [line.split() for line in lines[start + 1:] if line.split() and line.split()[0].isdigit()]


def test_total_mode_table_and_plot(tmp_path, capsys):
    png = tmp_path / "eps.png"
    code = main(BASE + ["--mode", "total", "--eps", "1", "--schedule", "geometric", "--ratio", "1.1",
                        "--out", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = table_rows(out)
    assert [r[0] for r in rows] == ["0", "1", "2"]
    for r in rows:
        assert r[2] == "6"  # releases
        eps_zcdp, eps_rdp, eps_pld = map(float, r[4:7])
        assert 0.97 <= eps_pld <= 1.0 < eps_rdp < eps_zcdp
        assert float(r[8]) < eps_pld  # add/remove view spends less
    assert "within the total budget" in out


def test_scenario_file_with_overrides(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("name: small\ndata: {n_samples: 2000}\nfederation: {num_clients: 2}\n"
                    "basis: {kind: fixed, n_components: 3}\nalgorithm: {rounds: 5}\n")
    code = main(["privacy", str(path), "--set", "privacy.eps=0.3", "--out", str(tmp_path / "p.png"), "--no-pld"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("small:")
    rows = table_rows(out)
    assert len(rows) == 2
    assert float(rows[0][7]) == pytest.approx(0.3, rel=1e-3)  # Zhou & Xiang's (2022) per-round figure
    assert rows[0][6] == "-"  # PLD skipped
    assert float(rows[0][5]) > 0.3  # five rounds spend more than one


def test_privacy_off_and_errors(tmp_path, capsys):
    assert main(["privacy", "--set", "privacy.enabled=false", "--out", str(tmp_path / "x.png")]) == 0
    assert "privacy is off" in capsys.readouterr().out
    assert not (tmp_path / "x.png").exists()
    assert main(["privacy", "--set", "basis.n_components=null", "--set", "basis.explained_variance=0.9",
                 "--out", str(tmp_path / "y.png")]) == 2
    assert "n_components" in capsys.readouterr().err
    assert main(["privacy", "--set", "privacy.epsiln=1", "--out", str(tmp_path / "z.png")]) == 2


def test_register_adds_the_subcommand():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["privacy", "s.yaml", "--set", "a.b=1", "--eps", "2"])
    assert args.scenario == "s.yaml" and args.overrides == ["a.b=1"] and args.eps == 2.0 and callable(args.func)


def test_privacy_layer_does_not_import_flwr():
    code = ("import sys, fdp_flower.privacy, fdp_flower.privacy.guard, fdp_flower.privacy.closed_forms, "
            "fdp_flower.cli.privacy; assert 'flwr' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
