"""The repository stands alone: no file points outside it, every equation the code cites exists in
docs/algorithms.md, and the licence and citation metadata agree with pyproject.toml."""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ROOT / "docs" / "algorithms.md"
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".cff", ".txt", ".log", ".json", ".csv", ".cfg"}
SKIP_DIRS = {".git", ".venv", "__pycache__", "results_tmp", ".pytest_cache", ".hypothesis"}

# Written in pieces so that this file does not match itself.
FORBIDDEN = {
    "a path into the developers' shared folder": re.compile(re.escape("../" + "shared")),
    "a section of the developers' specification": re.compile("spec" + r" sections?\b", re.IGNORECASE),
    "the developers' specification file": re.compile(re.escape("ALGORITHMS" + ".md")),
    "a paper by its file number": re.compile("papers" + r"/00\d"),
    "a paper by its internal number": re.compile(r"\b[Pp]apers? " + "00" + r"[0-4]\b"),
}


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        paths = [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an unpacked sdist)
        paths = [p for p in ROOT.rglob("*") if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]
    return [p for p in paths if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name in {"LICENSE", "run.sh"})]


def test_the_file_list_covers_code_docs_and_scenarios():
    names = {p.relative_to(ROOT).as_posix() for p in _tracked_text_files()}
    assert {"README.md", "docs/algorithms.md", "pyproject.toml", "fdp_flower/algorithms/fdp_admm/update.py"} <= names
    assert any(n.startswith("scenarios/") and n.endswith(".yaml") for n in names)


def test_no_file_points_outside_the_repository():
    me = Path(__file__).resolve()
    hits = []
    for path in _tracked_text_files():
        if path.resolve() == me:
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                if pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{lineno}: {what}: {line.strip()[:120]}")
    assert not hits, "cite docs/algorithms.md or its references instead:\n" + "\n".join(hits)


def test_the_forbidden_patterns_do_match_what_they_forbid():
    samples = ["see ../" + "shared/spec", "spec" + " section 3", "ALGORITHMS" + ".md", "papers" + "/003_x.txt",
               "(paper" + " 000, Lemma 2)"]
    for sample, pattern in zip(samples, FORBIDDEN.values()):
        assert pattern.search(sample), sample


def _defined_equations() -> list[str]:
    labels = []
    for line in ALGORITHMS.read_text().splitlines():
        m = re.search(r"\((\d+\.\d+)\)\s*$", line) or re.match(r"\((\d+\.\d+)\) is this table", line)
        if m:
            labels.append(m.group(1))
    return labels


def test_equation_labels_are_unique_and_sections_exist():
    labels = _defined_equations()
    assert len(labels) == len(set(labels)), "an equation number is defined twice"
    assert {"1.2", "1.6", "3.1", "4.5", "5.7", "6.3"} <= set(labels)
    sections = set(re.findall(r"^## (\d+)\. ", ALGORITHMS.read_text(), re.MULTILINE))
    assert {label.split(".")[0] for label in labels} <= sections
    assert "## References" in ALGORITHMS.read_text()


CITED_EQUATIONS = re.compile(r"algorithms\.md, (?:eqs?\.|table) ((?:\(\d+\.\d+\)(?:-| and |, )?)+)")
CITED_SECTIONS = re.compile(r"algorithms\.md, sections? (\d+(?:(?:-|, | and )\d+)*)")


def test_every_cited_equation_and_section_exists():
    labels = set(_defined_equations())
    sections = set(re.findall(r"^## (\d+)\. ", ALGORITHMS.read_text(), re.MULTILINE))
    cited_eqs, cited_secs, missing = 0, 0, []
    for path in _tracked_text_files():
        text = path.read_text(errors="replace")
        for m in CITED_EQUATIONS.finditer(text):
            for label in re.findall(r"\((\d+\.\d+)\)", m.group(1)):
                cited_eqs += 1
                if label not in labels:
                    missing.append(f"{path.relative_to(ROOT)}: eq. ({label})")
        for m in CITED_SECTIONS.finditer(text):
            for number in re.findall(r"\d+", m.group(1)):
                cited_secs += 1
                if number not in sections:
                    missing.append(f"{path.relative_to(ROOT)}: section {number}")
    assert cited_eqs >= 10 and cited_secs >= 10  # the code does cite the document
    assert not missing, "\n".join(missing)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_license_file_is_the_apache_2_text_pyproject_declares():
    assert _pyproject()["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and "9. Accepting Warranty or Additional Liability." in text


def test_citation_cff_matches_pyproject_and_cites_the_four_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert cff["message"] and cff["title"]
    assert cff["authors"] == [{"name": "fdp-flower developers"}]
    assert str(cff["version"]) == _pyproject()["version"]
    assert cff["license"] == _pyproject()["license"]
    refs = cff["references"]
    assert len(refs) == 4
    for ref in refs:
        assert ref["type"] and ref["title"] and ref["authors"] and ref["year"]
    ids = {ref.get("doi") for ref in refs} | {i["value"] for ref in refs for i in ref.get("identifiers", [])}
    assert {"10.3390/math10162954", "arXiv:2306.14012", "arXiv:2011.00164"} <= ids
    # the same papers, with the same identifiers, in the bibliography of docs/algorithms.md
    bibliography = " ".join(ALGORITHMS.read_text().split("## References", 1)[1].split())
    for ref in refs:
        assert ref["title"] in bibliography
    for ident in ("10.3390/math10162954", "2306.14012", "2011.00164"):
        assert ident in bibliography


@pytest.mark.parametrize("doc", ["README.md", "docs/privacy.md", "docs/p2p.md", "docs/architecture.md"])
def test_relative_markdown_links_resolve(doc):
    path = ROOT / doc
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc}: broken link {target}"
