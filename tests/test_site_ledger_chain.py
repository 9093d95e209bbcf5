"""The site ledger cannot be rolled back silently: a hash chain with a head kept in another directory.

Each case builds a real ledger with :meth:`SiteLedger.charge`, damages it the way an operator, a
crash, a full disk or an attacker with access to the ledger's directory would, and checks (1) that
every release is then refused with one line naming the files and the command that resolves it, (2)
what the files hold afterwards, and (3) the operator's explicit command (``fdp-flower site-ledger``
status / repair / reset / adopt), run through the real command line, and what it leaves on disk.
Before the chain (format ``fdp-flower-site-ledger/1``) a ledger cut at a line boundary lost its
charges without notice and a deleted ledger started a fresh budget:
``test_the_old_ledger_lost_its_charges_without_notice`` shows it on that format's file.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from fdp_flower.cli import main
from fdp_flower.privacy import GaussianRelease, pld_epsilon
from fdp_flower.privacy.site_ledger import (
    FORMAT,
    GENESIS,
    LEGACY_FORMAT,
    LedgerHead,
    SiteLedger,
    SiteLedgerError,
    chain_line,
    line_hash,
    scan_ledger,
)
from fdp_flower.privacy.site_policy import SitePolicy, SiteRefusal, SiteRelease, site_epsilon
from tests.test_faults import task_identity  # noqa: F401  (autouse fixture: Flower's task identity)

RUN = 77
POLICY = SitePolicy(max_eps=50.0)
SIGMA = 20.0  # z = 40 per release: a cheap PLD


def entry(round_: int, run: int = RUN) -> SiteRelease:
    return SiteRelease(run, GaussianRelease(0, round_, 0.5, SIGMA, mechanism="fdp_admm_primal"), "os_entropy",
                       "sha256:s")


def eps_of(n: int) -> float:
    return pld_epsilon([GaussianRelease(0, r, 0.5, SIGMA, mechanism="fdp_admm_primal") for r in range(n)], 1e-5)


@pytest.fixture
def ledger(tmp_path) -> SiteLedger:
    """A ledger of 4 releases (5 lines: "open" + 4) in tmp/site, its head in tmp/site-head."""
    led = SiteLedger(tmp_path / "site" / "site-ledger.jsonl")
    for r in (1, 2, 3, 4):
        led.charge(entry(r), POLICY)
    return led


def lines(path) -> list[str]:
    return path.read_text().splitlines()


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out.strip(), out.err.strip()


def refused(led: SiteLedger, expected: str) -> str:
    """Every use is refused with one line starting ``expected``, and a refused charge writes nothing."""
    before = {p: p.read_bytes() for p in (led.path, led.head_path) if p.exists()}
    for attempt in (lambda: led.charge(entry(9), POLICY), led.read, lambda: led.totals(POLICY, RUN)):
        with pytest.raises(SiteLedgerError) as info:
            attempt()
        assert str(info.value).startswith(expected), str(info.value)
        assert "\n" not in str(info.value)
    assert {p: p.read_bytes() for p in (led.path, led.head_path) if p.exists()} == before
    return str(info.value)


# ------------------------------------------------------------------ the chain and the head
def test_the_ledger_is_a_hash_chain_and_the_head_records_its_end(ledger):
    rows = [json.loads(x) for x in lines(ledger.path)]
    assert [r["kind"] for r in rows] == ["open", "release", "release", "release", "release"]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5] and all(r["format"] == FORMAT for r in rows)
    assert rows[0]["prev"] == GENESIS
    for previous, line, row in zip(lines(ledger.path), lines(ledger.path)[1:], rows[1:]):
        assert row["prev"] == line_hash(previous)  # each line names the hash of the one before
    head = LedgerHead.parse(ledger.head_path.read_text())
    assert (head.count, head.hash, head.releases) == (5, line_hash(lines(ledger.path)[-1]), 4)
    assert head.ledger == str(ledger.path) and head.ledger_id == rows[0]["ledger"]
    assert head.precision == {"replace_one": pytest.approx(4 / 40**2), "add_remove": pytest.approx(4 / 40**2)}
    assert head.eps(1e-5, "replace_one") == pytest.approx(eps_of(4), rel=1e-6)
    assert ledger.head_path.parent == ledger.path.parent.with_name("site-head")  # apart from the ledger
    assert oct(ledger.head_path.stat().st_mode & 0o777) == "0o600"
    assert ledger.totals(POLICY, RUN).eps == pytest.approx(eps_of(4), rel=1e-6)


def test_the_head_must_live_apart_from_the_ledger(tmp_path):
    with pytest.raises(ValueError, match="must be in another directory than the ledger"):
        SiteLedger(tmp_path / "l" / "site-ledger.jsonl", tmp_path / "l" / "x.head.json")
    from fdp_flower.privacy.site_policy import SitePolicyError
    with pytest.raises(SitePolicyError, match="ledger-head-dir must not be ledger-dir"):
        SitePolicy.from_node_config({"ledger-dir": str(tmp_path / "l"), "ledger-head-dir": str(tmp_path / "l")})
    for key in ("ledger-dir", "ledger-head-dir"):
        with pytest.raises(SitePolicyError, match=f"{key} must be an absolute path, got 'rel/dir'"):
            SitePolicy.from_node_config({key: "rel/dir"})
    assert SitePolicy.from_node_config({"ledger-dir": "~/fdp"}).ledger_path().is_absolute()
    policy = SitePolicy.from_node_config({"ledger-dir": str(tmp_path / "l"), "ledger-head-dir": str(tmp_path / "h")})
    assert policy.ledger_head_path().parent == tmp_path / "h"
    assert SitePolicy.from_node_config({"ledger-dir": str(tmp_path / "l")}).ledger_head_path().parent == \
        tmp_path / "l-head"


def test_a_crash_between_the_ledger_and_the_head_over_counts(ledger):
    """The line is fsynced before the head is replaced: a crash in between leaves a ledger one line longer
    than its head, which is accepted (that release may have been charged but never sent: an over-count)."""
    head_before = ledger.head_path.read_bytes()
    ledger.charge(entry(5), POLICY)
    ledger.head_path.write_bytes(head_before)  # as if the node died before the head was written
    assert ledger.totals(POLICY, RUN).releases == 5
    ok, line = ledger.status()
    assert ok and "plus 1 later line(s)" in line
    ledger.charge(entry(6), POLICY)  # and the next charge brings the head up to date
    assert LedgerHead.parse(ledger.head_path.read_text()).count == 7


# ------------------------------------------------------------------ rolled back: every release refused
def test_a_ledger_cut_at_a_line_boundary_fails_closed(ledger, capsys):
    full = ledger.path.read_bytes()
    ledger.path.write_text("\n".join(lines(ledger.path)[:3]) + "\n")  # the last two releases cut off
    reason = refused(ledger, f"site ledger {ledger.path} has 3 lines but its head {ledger.head_path} records 5 "
                             "(4 releases): lines were removed (cut at a line boundary, or replaced by an older copy)")
    assert f"fdp-flower site-ledger reset --ledger {ledger.path} --head {ledger.head_path}" in reason
    assert len(lines(ledger.path)) == 3  # nothing rewritten by the code
    code, out, _ = cli(capsys, "site-ledger", "status", "--ledger", str(ledger.path), "--head", str(ledger.head_path))
    assert code == 1 and out == f"refused: {reason}"
    ledger.path.write_bytes(full)  # the operator restores the whole ledger: usable again
    assert ledger.charge(entry(5), POLICY).releases == 5


def test_a_line_removed_in_the_middle_breaks_the_chain(ledger):
    kept = lines(ledger.path)
    ledger.path.write_text("\n".join(kept[:2] + kept[3:]) + "\n")
    refused(ledger, f"site ledger {ledger.path}: line 3 does not follow line 2 (its seq differs): the ledger was "
                    "edited; restore the ledger from a copy that matches its head")
    # renumbering does not help: the next line names the hash of the removed one
    row = json.loads(kept[3])
    ledger.path.write_text("\n".join(kept[:2] + [json.dumps({**row, "seq": 3}, sort_keys=True)]) + "\n")
    refused(ledger, f"site ledger {ledger.path}: line 3 does not follow line 2 (its prev hash differs)")
    # nor does editing a release in place (a larger sigma: a smaller charge)
    edited = json.dumps({**json.loads(kept[2]), "sigma": 1e6}, sort_keys=True)
    ledger.path.write_text("\n".join(kept[:2] + [edited] + kept[3:]) + "\n")
    refused(ledger, f"site ledger {ledger.path}: line 4 does not follow line 3 (its prev hash differs)")
    ledger.path.write_text("\n".join(kept[:-1] + [edited.replace('"seq": 3', '"seq": 5')]) + "\n")
    refused(ledger, f"site ledger {ledger.path}: line 5 does not follow line 4 (its prev hash differs)")


def test_a_ledger_replaced_by_an_older_copy_or_another_ledger_fails_closed(ledger, tmp_path):
    old = tmp_path / "backup.jsonl"
    shutil.copy(ledger.path, old)  # a backup of 4 releases...
    ledger.charge(entry(5), POLICY)
    ledger.charge(entry(6), POLICY)  # ... then two more releases
    shutil.copy(old, ledger.path)  # the backup is restored over the ledger
    refused(ledger, f"site ledger {ledger.path} has 5 lines but its head {ledger.head_path} records 7 (6 releases)")
    # a ledger of the same length written elsewhere (another site, or rebuilt by hand) is not this one
    other = SiteLedger(tmp_path / "other" / "site-ledger.jsonl")
    for r in range(1, 7):
        other.charge(entry(r), SitePolicy(max_eps=50.0))
    shutil.copy(other.path, ledger.path)
    refused(ledger, f"site ledger {ledger.path} is not the ledger its head {ledger.head_path} belongs to (ledger id")
    # a well-formed chain with this ledger's id and length whose last release is lighter (sigma 1e6): the
    # chain holds, but its last line is not the one the head records
    shutil.copy(old, ledger.path)
    ledger.head_path.write_text(ledger.head_path.read_text())
    genuine = lines(old) + [line for line in lines(ledger.path)[5:]]
    rows = [json.loads(x) for x in genuine]
    forged, prev = [], GENESIS
    for row in rows[:5] + [{**rows[4], "round": 5}, {**rows[4], "round": 6, "sigma": 1e6}]:
        line = chain_line(len(forged) + 1, prev, row["kind"], {k: v for k, v in row.items()
                                                                if k not in ("seq", "prev", "kind", "format")})
        forged.append(line)
        prev = line_hash(line)
    ledger.path.write_text("\n".join(forged) + "\n")
    assert scan_ledger(ledger.path.read_bytes()).problem is None and len(forged) == 7
    refused(ledger, f"site ledger {ledger.path}: line 7 is not the line its head {ledger.head_path} records (its hash "
                    "differs): the ledger was replaced or edited")


def test_a_deleted_or_unmounted_ledger_fails_closed_while_its_head_survives(ledger, capsys):
    shutil.rmtree(ledger.path.parent)  # deleted with its directory, or its volume not mounted
    reason = refused(ledger, f"site ledger {ledger.path} is missing, but its head {ledger.head_path} records 5 lines "
                             "(4 releases): it was deleted, moved, emptied or its volume is not mounted")
    assert not ledger.path.parent.exists()  # a refused charge does not create a fresh ledger
    ledger.path.parent.mkdir()
    ledger.path.write_bytes(b"")  # an empty file in its place
    refused(ledger, f"site ledger {ledger.path} is empty, but its head")
    assert ledger.path.read_bytes() == b""
    assert "reset" in reason


def test_a_missing_head_fails_closed_until_the_operator_adopts_the_ledger(ledger, capsys):
    ledger_bytes = ledger.path.read_bytes()
    ledger.head_path.unlink()
    reason = refused(ledger, f"site ledger {ledger.path} has no head ({ledger.head_path} is missing), so a rollback "
                             "cannot be ruled out")
    assert reason.endswith(f"fdp-flower site-ledger adopt --ledger {ledger.path} --head {ledger.head_path}")
    args = ("site-ledger", "adopt", "--ledger", str(ledger.path), "--head", str(ledger.head_path))
    code, out, _ = cli(capsys, *args)  # without --yes: says what it would do, changes nothing
    assert code == 1 and out.startswith(f"would adopt site ledger {ledger.path} (5 lines, 4 releases (eps = ")
    assert ledger.path.read_bytes() == ledger_bytes and not ledger.head_path.exists()
    code, out, _ = cli(capsys, *args, "--yes")
    assert code == 0 and out.startswith(f"adopted site ledger {ledger.path} (4 releases")
    rows = [json.loads(x) for x in lines(ledger.path)]
    assert ledger.path.read_bytes().startswith(ledger_bytes) and rows[-1]["kind"] == "adopt"  # logged, appended
    assert LedgerHead.parse(ledger.head_path.read_text()).count == 6
    assert ledger.charge(entry(5), POLICY).releases == 5  # every charge kept
    code, out, _ = cli(capsys, *args, "--yes")
    assert code == 0 and out.endswith("nothing to adopt")


def test_a_corrupt_head_fails_closed(ledger):
    ledger.head_path.write_text("{not json")
    refused(ledger, f"its head {ledger.head_path} is corrupt (JSONDecodeError: ")
    ledger.head_path.write_text(json.dumps({"format": "fdp-flower-site-ledger-head/1", "ledger": str(ledger.path),
                                            "ledger-id": "x", "count": 1}))
    refused(ledger, f"its head {ledger.head_path} is corrupt (KeyError: 'hash')")


# ------------------------------------------------------------------ a torn line (crash, full disk): repair
def test_a_torn_last_line_is_repaired_by_an_explicit_logged_command(ledger, capsys):
    complete = ledger.path.read_bytes()
    torn = b'{"client": 0, "format": "fdp-flower-site-ledger/2", "kind": "rel'
    with open(ledger.path, "ab") as fh:
        fh.write(torn)  # the node died (or the disk filled up) while writing line 6
    reason = refused(ledger, f"site ledger {ledger.path}: line 6 is incomplete (the node stopped, or the disk filled "
                             "up, while writing it; that release never left the site): remove it with fdp-flower "
                             f"site-ledger repair --ledger {ledger.path} --head {ledger.head_path}")
    assert reason.endswith(str(ledger.head_path))
    args = ("site-ledger", "repair", "--ledger", str(ledger.path), "--head", str(ledger.head_path))
    code, out, _ = cli(capsys, *args)
    assert code == 1 and out.startswith(f"a repair of site ledger {ledger.path} would remove the incomplete line 6 "
                                        f"({len(torn)} bytes")
    assert ledger.path.read_bytes() == complete + torn  # a dry run changes nothing
    code, out, _ = cli(capsys, *args, "--yes")
    assert code == 0 and out.startswith(f"repaired site ledger {ledger.path}: removed the incomplete line 6") and \
        out.endswith("logged as line 6")
    # on disk: the 5 complete lines unchanged, then the repair line holding the removed bytes; the head follows
    assert ledger.path.read_bytes().startswith(complete)
    repair = json.loads(lines(ledger.path)[5])
    assert repair["kind"] == "repair" and repair["removed_text"] == torn.decode()
    assert repair["removed_bytes"] == len(torn) and repair["seq"] == 6
    assert LedgerHead.parse(ledger.head_path.read_text()).count == 6
    assert ledger.charge(entry(5), POLICY).releases == 5  # usable again, nothing forgotten
    code, out, _ = cli(capsys, *args, "--yes")
    assert code == 0 and out.endswith("nothing to repair")


def test_repair_removes_a_torn_line_only(ledger, capsys):
    kept = lines(ledger.path)
    ledger.path.write_text("\n".join(kept[:2] + kept[3:]) + "\n" + kept[0][:20])  # a gap and a torn end
    code, _, err = cli(capsys, "site-ledger", "repair", "--ledger", str(ledger.path), "--head", str(ledger.head_path),
                       "--yes")
    assert code == 1 and err.startswith("error: repair only removes an incomplete last line; besides it, site "
                                        f"ledger {ledger.path}: line 3 does not follow line 2")
    assert ledger.path.read_text().endswith(kept[0][:20])  # untouched


# ------------------------------------------------------------------ reset: says what it forgets
def test_reset_says_what_it_forgets_keeps_the_old_file_and_logs_itself(ledger, capsys):
    shutil.rmtree(ledger.path.parent)  # the ledger is lost for good
    args = ("site-ledger", "reset", "--node-config", f'ledger-dir="{ledger.path.parent}" max-delta=1e-6')
    code, out, _ = cli(capsys, *args)
    eps6 = pld_epsilon([GaussianRelease(0, r, 0.5, SIGMA) for r in range(4)], 1e-6)
    assert code == 1 and out.startswith(f"a reset of site ledger {ledger.path} would forget 0 releases (eps = 0 at "
                                        f"delta 1e-06, replace_one, PLD) readable in the ledger and the 4 releases its "
                                        f"head records (eps = {eps6:.6g}); add --yes to reset it")
    assert not ledger.path.exists()
    code, out, _ = cli(capsys, *args, "--yes", "--reason", "disk lost; new data set")
    assert code == 0 and out.startswith(f"reset site ledger {ledger.path}: forgot 0 releases") and \
        "(the ledger file was missing)" in out
    (first,) = [json.loads(x) for x in lines(ledger.path)]
    assert first["kind"] == "reset" and first["reason"] == "disk lost; new data set"
    assert first["forgotten_releases"] == 4 and first["previous_head"]["count"] == 5
    assert f"the 4 releases its head records (eps = {eps6:.6g})" in first["forgets"]
    assert LedgerHead.parse(ledger.head_path.read_text()).count == 1
    totals = ledger.charge(entry(1), POLICY)  # a new budget: round 1 of the same run is no re-release any more
    assert totals.releases == 1 and totals.eps == pytest.approx(eps_of(1), rel=1e-6)


def test_reset_of_a_present_ledger_keeps_it_aside(ledger, capsys):
    old = ledger.path.read_bytes()
    ledger.path.write_text("\n".join(lines(ledger.path)[:3]) + "\n")  # cut: 2 releases readable, the head says 4
    code, out, _ = cli(capsys, "site-ledger", "reset", "--ledger", str(ledger.path.parent), "--yes")
    assert code == 0 and f"forgot 2 releases (eps = {eps_of(2):.6g} at delta 1e-05, replace_one, PLD) readable in " \
                         f"the ledger and the 4 releases its head records (eps = {eps_of(4):.6g})" in out
    (kept,) = ledger.path.parent.glob("site-ledger.jsonl.reset-*")
    assert kept.read_bytes() == b"".join(x + b"\n" for x in old.split(b"\n")[:3])  # nothing deleted
    assert [json.loads(x)["kind"] for x in lines(ledger.path)] == ["reset"]
    assert json.loads(lines(ledger.path)[0])["previous_ledger"] == str(kept)


# ------------------------------------------------------------------ migration: a ledger without a chain
def legacy_line(r: SiteRelease) -> str:
    rel = r.release
    return json.dumps({"format": LEGACY_FORMAT, "time": "2025-01-01T00:00:00Z", "run": r.run, "scenario": r.scenario,
                       "client": rel.client, "round": rel.round, "mechanism": rel.mechanism,
                       "sensitivity": rel.sensitivity, "sigma": rel.sigma, "neighbouring": rel.neighbouring,
                       "noise": r.noise_source}, sort_keys=True) + "\n"


def test_the_old_ledger_lost_its_charges_without_notice(tmp_path):
    """What the chain fixes, on a file of the old format: cut at a line boundary, it still parses (the old
    reader took every line at face value) and it reports fewer releases."""
    text = "".join(legacy_line(entry(r)) for r in (1, 2, 3, 4))
    cut = "".join(text.splitlines(keepends=True)[:2])
    assert len(scan_ledger(cut.encode()).releases) == 2 and scan_ledger(cut.encode()).problem is None
    assert site_epsilon(scan_ledger(cut.encode()).releases, POLICY) < site_epsilon(
        scan_ledger(text.encode()).releases, POLICY)


def test_a_ledger_without_a_chain_is_adopted_explicitly_not_silently(tmp_path, capsys):
    led = SiteLedger(tmp_path / "site" / "site-ledger.jsonl")
    led.path.parent.mkdir()
    old = "".join(legacy_line(entry(r)) for r in (1, 2, 3)) + legacy_line(entry(4))[:30]  # and a torn line
    led.path.write_text(old)
    refused(led, f"site ledger {led.path} has no hash chain (format {LEGACY_FORMAT}, 3 releases, and an incomplete "
                 f"last line): check it is complete and adopt it once with fdp-flower site-ledger adopt --ledger "
                 f"{led.path} --head {led.head_path}")
    assert led.path.read_text() == old and not led.head_path.exists()
    code, out, _ = cli(capsys, "site-ledger", "adopt", "--ledger", str(led.path), "--yes")
    assert code == 0 and out.startswith(f"adopted site ledger {led.path}: 3 releases (eps = {eps_of(3):.6g} at delta "
                                        "1e-05, replace_one, PLD), dropping an incomplete last line of 30 bytes, now "
                                        "a hash chain of 4 lines")
    (kept,) = led.path.parent.glob("site-ledger.jsonl.v1-*")
    assert kept.read_text() == old  # the old file, byte for byte
    rows = [json.loads(x) for x in lines(led.path)]
    assert [r["kind"] for r in rows] == ["adopt", "release", "release", "release"]
    assert rows[0]["previous_ledger"] == str(kept) and rows[0]["removed_text"] == legacy_line(entry(4))[:30]
    assert [r["round"] for r in rows[1:]] == [1, 2, 3]
    assert led.charge(entry(4), POLICY).eps == pytest.approx(eps_of(4), rel=1e-6)  # every old charge kept
    with pytest.raises(SiteRefusal, match="re-release"):
        led.charge(entry(2), POLICY)  # and still known


def test_status_of_a_healthy_and_of_a_new_ledger(ledger, capsys, tmp_path):
    code, out, _ = cli(capsys, "site-ledger", "status", "--ledger", str(ledger.path))
    assert code == 0 and out == (f"site ledger {ledger.path}: 5 lines, 4 releases (eps = {eps_of(4):.6g} at delta "
                                 f"1e-05, replace_one, PLD); matches its head {ledger.head_path}")
    new = tmp_path / "new"
    code, out, _ = cli(capsys, "site-ledger", "status", "--ledger", str(new))
    assert code == 0 and out.startswith(f"site ledger {new / 'site-ledger.jsonl'}: new (nothing recorded yet)")
    # with the SuperNode's node config and no ledger-dir: under FLWR_HOME, as the SuperNode sees it
    os.environ["FLWR_HOME"] = str(tmp_path / "home")
    try:
        code, out, _ = cli(capsys, "site-ledger", "status", "--node-config", "partition-id=0 max-eps=2")
    finally:
        del os.environ["FLWR_HOME"]
    assert out.startswith(f"site ledger {tmp_path / 'home' / 'fdp-flower-site' / 'site-ledger.jsonl'}: new")
    code, _, err = cli(capsys, "site-ledger", "status", "--node-config", "max-esp=2")
    assert code == 2 and err.startswith("error: node config key 'max-esp' is not known; did you mean 'max-eps'?")


# ------------------------------------------------------------------ through the ClientApp a SuperNode runs
def test_the_client_app_refuses_a_rolled_back_ledger_in_one_line(tmp_path, monkeypatch):
    from tests.test_site_privacy import call_train, context, node_file, node_scenario, train_message

    sc, path = node_scenario(), node_file(tmp_path)
    ledger_dir = tmp_path / "ledger"
    assert not call_train(monkeypatch, sc, context(path, ledger_dir), train_message(sc, 1)).has_error()
    assert not call_train(monkeypatch, sc, context(path, ledger_dir), train_message(sc, 2)).has_error()
    (head,) = (tmp_path / "ledger-head").glob("*.head.json")
    ledger_file = ledger_dir / "site-ledger.jsonl"
    ledger_file.write_text("\n".join(lines(ledger_file)[:2]) + "\n")  # round 2's charge removed
    reply = call_train(monkeypatch, sc, context(path, ledger_dir), train_message(sc, 3))
    assert reply.has_error() and not reply.has_content()
    # the reply names the ledger by its node-config key, never by the site's local path
    assert reply.error.reason.startswith(
        f"site ledger <ledger-dir>/site-ledger.jsonl has 2 lines but its head <ledger-dir>-head/{head.name} records 3")
    assert str(tmp_path) not in reply.error.reason
    assert len(lines(ledger_file)) == 2 and json.loads(head.read_text())["count"] == 3
    # and a deleted ledger no longer starts a fresh budget
    ledger_file.unlink()
    reply = call_train(monkeypatch, sc, context(path, ledger_dir), train_message(sc, 1))
    assert reply.has_error() and "site ledger <ledger-dir>/site-ledger.jsonl is missing, but its head" in reply.error.reason
    assert str(tmp_path) not in reply.error.reason
    assert not ledger_file.exists()


@pytest.mark.parametrize("which", ["ledger", "head"])
def test_a_read_only_ledger_or_head_fails_closed(ledger, monkeypatch, which):
    """A read-only volume (EROFS from the kernel; simulated at os.open, since root may write anywhere): nothing
    is released, both files stay as they were."""
    import errno

    before = (ledger.path.read_bytes(), ledger.head_path.read_bytes())
    real_open = os.open
    target = str(ledger.path) if which == "ledger" else str(ledger.head_path.parent)

    def read_only(path, flags, *args, **kw):
        if str(path).startswith(target) and flags & (os.O_WRONLY | os.O_RDWR) and not str(path).endswith(".lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", read_only)
    message = {"ledger": f"site ledger {ledger.path}: could not open it (Read-only file system); nothing was released",
               "head": f"site ledger head {ledger.head_path}: could not write it (Read-only file system); nothing "
                       "was released"}[which]
    with pytest.raises(SiteLedgerError) as info:
        ledger.charge(entry(5), POLICY)
    assert str(info.value) == message
    monkeypatch.setattr(os, "open", real_open)
    if which == "ledger":
        assert (ledger.path.read_bytes(), ledger.head_path.read_bytes()) == before
    else:  # the line was written and fsynced before the head failed: an over-count, accepted afterwards
        assert ledger.path.read_bytes().startswith(before[0]) and ledger.head_path.read_bytes() == before[1]
        assert ledger.totals(POLICY, RUN).releases == 5
