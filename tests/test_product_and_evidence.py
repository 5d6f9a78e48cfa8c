"""The kit and the evidence of how it was measured are kept apart: the kit's code and pages speak
of its users' machines, campaign files are alone in results/campaigns/, the script that drives the
GPU machine has one versioned place (docs/gpu-machine/), the dated reports follow their template
and their scripts are linted, and the README maps bench/ one line per package."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.test_import_graph import STAGES

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "docs" / "reports"
GPU_MACHINE = REPO / "docs" / "gpu-machine"
# Reports written to the template that names the GPU-machine script and its commit (later days).
NAMES_ITS_SCRIPT_FROM = "2026-11-29"
# How the kit was developed, not what it is: the GPU machine is the user's, never "lent", and the
# kit's own issue numbers mean nothing to a reader of the product (upstream ones are written
# owner/repo#N or "pull request #N", which this does not match).
DEVELOPMENT_WORDS = re.compile(r"\blent\b|device call|\bissues? #?\d+", re.IGNORECASE)
PRODUCT_FOLDERS = ("bench", "patches", "results", "docs")
# Evidence keeps its history (append-only, results/evidence/manifest.json); images are no text.
NOT_PRODUCT = (REPORTS, REPO / "results" / "records")
NOT_TEXT = {".png", ".pyc"}


def _product_files() -> list[Path]:
    """The kit's code, patches, data and pages, and the campaign files users run (their
    descriptions say what a campaign measures on which hardware, not on whose)."""
    files = [path for folder in PRODUCT_FOLDERS for path in sorted((REPO / folder).rglob("*"))
             if path.is_file() and path.suffix not in NOT_TEXT
             and not any(path.is_relative_to(skipped) for skipped in NOT_PRODUCT)]
    return [*files, REPO / "README.md"]


@pytest.mark.parametrize("path", _product_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_kit_speaks_of_the_gpu_machine(path: Path) -> None:
    found = [line for line in path.read_text(encoding="utf-8").splitlines() if DEVELOPMENT_WORDS.search(line)]
    assert not found, f"{path.relative_to(REPO)}: say 'the GPU machine': {found}"


def test_the_words_guard_reads_the_campaign_files() -> None:
    campaigns = [p for p in _product_files() if p.parent == REPO / "results" / "campaigns"]
    assert {"h200x1.toml", "x4.toml"} <= {p.name for p in campaigns}


def test_the_words_guard_reads_the_product_and_skips_the_evidence() -> None:
    read = {p.relative_to(REPO).as_posix() for p in _product_files()}
    assert {"README.md", "bench/results/fourgpu.py", "patches/ms-amp/series", "results/reference_ranges.toml",
            "docs/precisions.md", "docs/gpu-machine/campaign.sh"} <= read
    assert not [name for name in read if name.startswith(("docs/reports/", "results/records/"))]


@pytest.mark.parametrize(("line", "found"), [
    ("on the lent H200s", True), ("issue 46's campaign", True), ("Issue #33", True),
    ("upstream: deepspeedai/DeepSpeed#4645", False), ("pull request #469", False),
    ("a silent issue with 12 GB", False), ("the GPU machine", False),
])
def test_the_words_guard_tells_kit_issues_from_upstream_ones(line: str, found: bool) -> None:
    assert bool(DEVELOPMENT_WORDS.search(line)) is found


def test_results_campaigns_holds_only_campaign_files() -> None:
    others = [p.name for p in (REPO / "results" / "campaigns").iterdir() if p.suffix != ".toml"]
    assert others == [], "scripts and smoke reports go with their dated report in docs/reports/"


def test_every_report_is_named_as_the_template_says() -> None:
    template = (REPORTS / "README.md").read_text(encoding="utf-8")
    for heading in ("## Name", "Stack", "Commands", "Records", "What was not run"):
        assert heading in template
    name = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z0-9]+-[a-z0-9-]+")
    for path in REPORTS.iterdir():
        if path.name == "README.md":
            continue
        stem = path.stem if path.is_file() else path.name
        assert name.fullmatch(stem), f"{path.name}: not YYYY-MM-DD-<machine>-<topic>"
        if path.is_dir():
            assert (REPORTS / f"{path.name}.md").is_file(), f"{path.name}/ has no report beside it"


@pytest.mark.parametrize("script", [*sorted(REPORTS.rglob("*.sh")), *sorted(GPU_MACHINE.glob("*.sh"))],
                         ids=lambda p: str(p.relative_to(REPO / "docs")))
def test_the_reports_shell_scripts_parse(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_template_names_the_gpu_machine_script_and_the_commits() -> None:
    """A report names the kit commit it ran and the GPU-machine script with its commit; the
    script lives in docs/gpu-machine/, never as a copy in a report's folder."""
    template = (REPORTS / "README.md").read_text(encoding="utf-8").split("## Template", 1)[1]
    assert "the kit at <commit>" in template
    assert "Script: [`docs/gpu-machine/campaign.sh`](../gpu-machine/campaign.sh) at <commit>" in template
    assert (GPU_MACHINE / "campaign.sh").is_file()


@pytest.mark.parametrize("report", sorted(p for p in REPORTS.glob("2*.md") if p.stem >= NAMES_ITS_SCRIPT_FROM),
                         ids=lambda p: p.name)
def test_a_new_report_names_its_kit_and_script_commits(report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    assert re.search(r"the kit at `?[0-9a-f]{7,40}\b", text), f"{report.name}: no 'the kit at <commit>'"
    script = re.search(r"^Script: .*docs/gpu-machine/([\w.-]+\.sh).* at `?[0-9a-f]{7,40}\b", text, re.M)
    assert script, f"{report.name}: no 'Script: docs/gpu-machine/<script>.sh at <commit>' line"
    assert (GPU_MACHINE / script.group(1)).is_file(), script.group(1)
    folder = REPORTS / report.stem
    copies = [p.name for p in folder.rglob("*.sh") if p.name in {q.name for q in GPU_MACHINE.glob("*.sh")}] \
        if folder.is_dir() else []
    assert not copies, f"{report.stem}/ holds a copy of the GPU-machine script: {copies}"


def test_the_lint_session_covers_the_reports_scripts() -> None:
    lint = re.search(r'def lint\(.*?session\.run\("ruff", "check", ([^)]*)\)', (REPO / "noxfile.py").read_text(),
                     re.S)
    assert lint and '"docs/reports"' in lint.group(1)


def test_the_readme_maps_every_package_in_pipeline_order() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Where things are in `bench/`", 1)[1].split("\n## ", 1)[0]
    mapped = re.findall(r"^\| \[`bench/(\w+)/`\]\(bench/\w+/\) \| \S.*\|$", section, re.M)
    packages = sorted(p.parent.name for p in (REPO / "bench").glob("*/__init__.py"))
    assert sorted(mapped) == packages
    assert mapped == list(STAGES)  # top to bottom as the floors are


def _campaign_names(path: Path) -> set[str]:
    """The groups and run names ``--only`` takes in a campaign file."""
    import tomllib

    names: set[str] = set()
    for run in tomllib.loads(path.read_text(encoding="utf-8")).get("run", []):
        group = run.get("group", [])
        names.update([group] if isinstance(group, str) else group)
        names.update([run["name"]] if "name" in run else [])
    return names


@pytest.mark.parametrize("report", sorted(p for p in REPORTS.glob("*.md") if p.name != "README.md"),
                         ids=lambda p: p.name)
def test_every_report_reruns_with_kit_commands(report: Path) -> None:
    """A "Rerun:" line: the wheelhouse, then the kit's own commands; each campaign and group named
    exists."""
    rerun = [line for line in report.read_text(encoding="utf-8").splitlines() if line.startswith("Rerun: ")]
    assert len(rerun) == 1, f"{report.name}: no 'Rerun:' line"
    assert "`nox -s wheelhouse -- cuda --dest W" in rerun[0]
    for campaign, only in re.findall(r"--campaign (results/campaigns/[\w.-]+\.toml)(?: --only ([\w.-]+))?", rerun[0]):
        assert (REPO / campaign).is_file(), campaign
        assert not only or only in _campaign_names(REPO / campaign), f"{campaign} has no group {only}"
    assert "bench run" in rerun[0] or "nox -s bench" in rerun[0]
    assert ".sh" not in rerun[0]  # the kit's commands, not the report's scripts


def test_the_reports_stay_under_one_megabyte() -> None:
    """Logs stay only where no record holds them: records carry metrics, losses and log tails."""
    size = sum(p.stat().st_size for p in REPORTS.rglob("*") if p.is_file())
    assert size < 1_000_000, f"docs/reports/ holds {size} bytes"


def test_the_readme_types_no_figures_of_the_reports() -> None:
    """Figures come from records (the results page, generated); the README's report table and its
    precisions section name what was measured and link, never a typed number."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("### Reports", 1)[1].split("\n## ", 1)[0]
    precisions = readme.split("## Precisions side by side", 1)[1].split("\n## ", 1)[0]
    figure = re.compile(r"\b\d+\.\d+\b|\b\d+(\.\d+)?x\b|TFLOP/s|\bms\b|\bGB less")
    for name, text in (("report table", table), ("precisions", precisions)):
        rows = [line for line in text.splitlines() if figure.search(line.split("](")[0])]
        assert not rows, f"README {name}: typed figures: {rows}"
