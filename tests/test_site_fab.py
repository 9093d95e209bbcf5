"""The pins of an app bundle and the check a site runs on every bundle before any of its code is imported
(the pure part, :mod:`fdp_flower.privacy.site_fab`; the launcher against real SuperNodes:
tests/test_site_app_pin_deployment.py)."""
from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest

from fdp_flower.cli import main
from fdp_flower.clients.site_launcher import _forget_modules_of, build_fab, describe_fab, site_pins
from fdp_flower.privacy import site_fab
from fdp_flower.privacy.site_fab import FabRefused, Pin, check_fab, fab_digests, parse_pin, read_allow_list
from tests.test_site_app_pin_deployment import THIEF_PYPROJECT

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def app(tmp_path) -> Path:
    """A small Flower app directory (the hostile bundle of the deployment test)."""
    d = tmp_path / "thief"
    d.mkdir()
    (d / "pyproject.toml").write_text(THIEF_PYPROJECT)
    shutil.copy(TESTS / "site_thief_app.py", d / "site_thief_app.py")
    return d


def rezip(content: bytes, compression: int, edit=None) -> bytes:
    """The same members in a new zip (another compression; ``edit(name, data)`` may change a member)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(content)) as src, zipfile.ZipFile(out, "w", compression) as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info.filename, edit(info.filename, data) if edit else data)
    return out.getvalue()


def test_the_pin_of_a_directory_is_the_hash_of_the_bundle_flwr_builds_from_it(app, tmp_path, capsys):
    """`fdp-flower fab-hash <dir>` names the bytes `flwr build` writes (and `flwr run` ships) with this Flower."""
    out = tmp_path / "built"
    out.mkdir()
    subprocess.run([str(Path(sys.executable).parent / "flwr"), "build", "--app", str(app)], cwd=out, check=True,
                   capture_output=True, timeout=120)
    (built,) = out.glob("*.fab")
    digest = hashlib.sha256(built.read_bytes()).hexdigest()
    assert built.name.endswith(f".{digest[:8]}.fab")  # Flower's own name for it
    assert main(["fab-hash", str(app)]) == 0
    from_dir = capsys.readouterr().out.splitlines()
    assert main(["fab-hash", str(built)]) == 0
    from_file = capsys.readouterr().out.splitlines()
    files_pin = f"files-sha256:{fab_digests(built.read_bytes()).files_sha256}"
    assert from_dir[:2] == from_file[:2] == [f"sha256:{digest}", files_pin]
    assert from_file[2].startswith(f"# {built}: 2 files, ")  # the manifest .info/CONTENT is not installed
    assert [name for name, _sha, _size in fab_digests(built.read_bytes()).files] == ["pyproject.toml",
                                                                                     "site_thief_app.py"]


def test_files_sha256_names_the_files_whatever_the_compression(app):
    content = build_fab(app)
    stored = rezip(content, zipfile.ZIP_STORED)
    a, b = fab_digests(content), fab_digests(stored)
    assert a.sha256 != b.sha256 and a.files_sha256 == b.files_sha256
    edited = rezip(content, zipfile.ZIP_DEFLATED,
                   lambda name, data: data.replace(b"hostile", b"friendly") if name.endswith(".py") else data)
    assert fab_digests(edited).files_sha256 != a.files_sha256  # one changed file: another app
    manifest = rezip(content, zipfile.ZIP_DEFLATED,
                     lambda name, data: data + b"\n" if name == ".info/CONTENT" else data)
    assert fab_digests(manifest).files_sha256 == a.files_sha256  # the manifest is not installed


def test_check_fab_approves_only_a_pinned_bundle_whose_announced_hash_is_its_own(app):
    content = build_fab(app)
    d = fab_digests(content)
    other = Pin("sha256", "0" * 64)
    assert check_fab(content, d.sha256, [other, Pin("sha256", d.sha256)])[1] == Pin("sha256", d.sha256)
    assert check_fab(content, d.sha256, [Pin("files-sha256", d.files_sha256)])[1].kind == "files-sha256"
    with pytest.raises(FabRefused) as info:
        check_fab(content, d.sha256, [other])
    assert str(info.value) == (f"the site refuses app bundle sha256:{d.sha256} (files-sha256:{d.files_sha256}): it "
                               "is not one of the 1 app(s) this site approved")
    with pytest.raises(FabRefused, match="the site approved no app"):
        check_fab(content, d.sha256, [])
    # the SuperLink announces the approved hash but sends other bytes: Flower would load the app by that name
    with pytest.raises(FabRefused, match=f"hash to sha256:{d.sha256}, but the SuperLink announced '{'1' * 64}'"):
        check_fab(content, "1" * 64, [Pin("sha256", "1" * 64), Pin("files-sha256", d.files_sha256)])


@pytest.mark.parametrize("make, message", [
    (lambda c: b"not a zip", "not a readable zip"),
    (lambda c: c[: len(c) // 2], "not a readable zip"),
])
def test_bytes_that_are_no_bundle_are_refused_in_one_line(app, make, message):
    content = make(build_fab(app))
    with pytest.raises(FabRefused, match=message) as info:
        fab_digests(content)
    assert "\n" not in str(info.value)


def test_duplicate_escaping_and_oversized_members_are_refused(app, monkeypatch):
    def zipped(members):
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for name, data in members:
                z.writestr(name, data)
        return out.getvalue()

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about the duplicate name
        dup = zipped([("a.py", b"1"), ("a.py", b"2")])
    with pytest.raises(FabRefused, match="names 'a.py' twice"):
        fab_digests(dup)
    with pytest.raises(FabRefused, match="a file outside the app: '../evil.py'"):
        fab_digests(zipped([("../evil.py", b"x")]))
    monkeypatch.setattr(site_fab, "MAX_UNPACKED_BYTES", 1000)
    with pytest.raises(FabRefused, match="unpacks to more than 1000 bytes"):
        fab_digests(zipped([("big.bin", b"\0" * 5000)]))
    corrupt = bytearray(zipped([("a.py", b"print(1)" * 20)]))
    corrupt[corrupt.index(b"print(1)") + 3] ^= 1  # a flipped bit in a stored member: its CRC fails
    with pytest.raises(FabRefused, match="Bad CRC-32"):
        fab_digests(bytes(corrupt))


def test_pins_and_allow_lists(tmp_path):
    h = "ab" * 32
    assert parse_pin(f"sha256:{h.upper()}") == Pin("sha256", h)
    assert str(parse_pin(f" files-sha256:{h} ")) == f"files-sha256:{h}"
    for bad in (h, f"sha1:{h}", f"sha256:{h[:-1]}", f"sha256:{h}0", "sha256:xyz"):
        with pytest.raises(ValueError, match="is not a pin: expected sha256:<64 hex digits> or files-sha256:"):
            parse_pin(bad)
    allow = tmp_path / "apps.pins"
    allow.write_text(f"# approved 2025-01-01\nsha256:{h}  # fdp-flower 0.1.0\n\nfiles-sha256:{'cd' * 32}\n")
    assert read_allow_list(allow) == [Pin("sha256", h), Pin("files-sha256", "cd" * 32)]
    assert site_pins([f"sha256:{'ef' * 32}"], str(allow))[0] == Pin("sha256", "ef" * 32)
    allow.write_text(f"sha256:{h}\nsha256:nope\n")
    with pytest.raises(ValueError, match=f"allow-list {allow}, line 2: 'sha256:nope' is not a pin"):
        read_allow_list(allow)
    with pytest.raises(ValueError, match="allow-list .*missing.pins: No such file"):
        read_allow_list(tmp_path / "missing.pins")


def test_the_launcher_refuses_to_start_without_a_pin(capsys):
    assert main(["site-clientapp", "--runtime-api-address", "127.0.0.1:9", "--insecure"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: site-clientapp: give the apps the site approved (--pin sha256:... or --allow-list FILE; fdp-flower "
        "fab-hash <app dir or .fab> prints the pins)")
    assert main(["site-clientapp", "--runtime-api-address", "127.0.0.1:9", "--pin", "sha256:12"]) == 2
    assert "give --insecure" in capsys.readouterr().err
    assert main(["site-clientapp", "--runtime-api-address", "127.0.0.1:9", "--insecure", "--pin", "sha256:12"]) == 2
    assert "--pin: 'sha256:12' is not a pin" in capsys.readouterr().err
    assert main(["fab-hash", "/nonexistent/app.fab"]) == 2
    assert "No such file" in capsys.readouterr().err


def test_an_approved_app_runs_its_own_files_not_the_launchers(tmp_path, monkeypatch):
    """The launcher has loaded fdp_flower from the site's installation; the approved bundle's copy is what
    must run (its files are what the pin names), so the launcher drops the modules the app provides."""
    app_dir = tmp_path / "app"
    (app_dir / "probe_pkg").mkdir(parents=True)
    (app_dir / "probe_pkg" / "__init__.py").write_text("WHO = 'the app bundle'\n")
    (app_dir / "probe_mod.py").write_text("WHO = 'the app bundle'\n")
    for name in ("probe_pkg", "probe_pkg.sub", "probe_mod", "probe_other"):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(WHO="the launcher"))
    _forget_modules_of(app_dir)
    assert not {"probe_pkg", "probe_pkg.sub", "probe_mod"} & set(sys.modules)
    assert sys.modules["probe_other"].WHO == "the launcher"  # not the app's: kept
    monkeypatch.syspath_prepend(str(app_dir))
    import probe_mod
    import probe_pkg
    assert probe_pkg.WHO == probe_mod.WHO == "the app bundle"
    monkeypatch.delitem(sys.modules, "probe_pkg")
    monkeypatch.delitem(sys.modules, "probe_mod")


def test_describe_fab_counts_the_installed_files(app):
    text = describe_fab(app).splitlines()
    assert text[2].startswith(f"# {app}: 2 files, ") and text[2].endswith(" bytes unpacked")


def test_an_approved_bundle_is_installed_once_and_checked_file_by_file_before_each_reuse(app, tmp_path, monkeypatch):
    from flwr.cli import install

    from fdp_flower.clients.site_launcher import installed_app

    content = build_fab(app)
    digests = fab_digests(content)
    calls = []
    real = install.install_from_fab
    monkeypatch.setattr(install, "install_from_fab", lambda *a, **k: calls.append(1) or real(*a, **k))
    apps = tmp_path / "apps"
    first = installed_app(content, digests, apps)
    assert first == apps / digests.sha256 and len(calls) == 1
    assert sorted(p.name for p in first.iterdir()) == ["pyproject.toml", "site_thief_app.py"]
    assert oct(apps.stat().st_mode & 0o777) == "0o700" and not list(apps.glob(".install-*"))
    (first / "__pycache__").mkdir()
    (first / "__pycache__" / "site_thief_app.cpython-311.pyc").write_bytes(b"compiled")  # Python's own cache
    assert installed_app(content, digests, apps) == first and len(calls) == 1  # reused
    (first / "site_thief_app.py").write_text("print('changed')\n")  # a file no longer the bundle's
    assert installed_app(content, digests, apps) == first and len(calls) == 2  # installed again
    assert (first / "site_thief_app.py").read_bytes() == (app / "site_thief_app.py").read_bytes()
    (first / "extra.py").write_text("x = 1\n")  # a file the bundle does not have
    installed_app(content, digests, apps)
    assert len(calls) == 3 and not (first / "extra.py").exists()
