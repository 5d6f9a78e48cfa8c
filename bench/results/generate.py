"""Regenerate ``README.md`` and ``plots/*.png`` in an output directory from the inputs.

Defaults are relative to the repository root: records in ``results/records``, output in
``results``, published figures and ranges in ``results/published.toml`` and
``results/reference_ranges.toml``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.records.store import RECORDS_DIR, load_records
from bench.results import fourgpu, losses, markdown, plots, predicted
from bench.results.aggregate import Report, build_report
from bench.results.data import load_published, load_ranges
from bench.results.drawing import Drawer
from bench.results.evidence import evidenced
from bench.results.hardware import load_ceilings, load_node_checks
from bench.results.profiles import plan_time_plot, time_rows
from bench.results.targets import load_targets

RESULTS_DIR = Path("results")
PUBLISHED_FILE = RESULTS_DIR / "published.toml"
RANGES_FILE = RESULTS_DIR / "reference_ranges.toml"
TARGETS_FILE = RESULTS_DIR / "targets.toml"
SMOKE_DIR = Path("docs") / "reports"  # the smoke checks' reports, kept with the campaign that ran them
PAGE = "README.md"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class Generated:
    """The report and the files to write, keyed by path relative to the output directory."""

    report: Report
    files: Mapping[str, bytes]


def generate(
    records_dir: Path = RECORDS_DIR,
    out_dir: Path = RESULTS_DIR,
    published_file: Path = PUBLISHED_FILE,
    ranges_file: Path = RANGES_FILE,
    draw_plots: bool = True,
    smoke_dir: Path = SMOKE_DIR,
    by_commit: bool = False,
    targets_file: Path | None = None,
) -> Generated:
    """Load everything and render the page (and, with ``draw_plots``, the PNGs) in memory.

    A PNG already in ``out_dir/plots`` whose inputs key matches is reused, not drawn again
    (:func:`bench.results.plots.reuse_or_render`).

    Runs of one configuration key share a row whatever their kit commit unless ``by_commit``. Bad
    records are skipped and listed in the report; a bad TOML file raises ValueError. With a
    ``targets_file`` (``results/targets.toml``) the page sets each target beside what answers it.
    """
    # The drawing process imports matplotlib while this one loads the inputs.
    with Drawer() if draw_plots else contextlib.nullcontext() as drawer:
        published = load_published(published_file)
        ranges = load_ranges(ranges_file)
        aims = load_targets(targets_file) if targets_file is not None else ()
        ceilings = load_ceilings(smoke_dir)
        runs, problems = load_records(records_dir)
        report = build_report(runs, problems, published, ranges, by_commit, evidenced(records_dir, runs))
        platform_specs = plots.plan_plots(report, ceilings)
        loss_specs = losses.plan_losses(runs)
        profiles = time_rows(runs)
        time_plot = plan_time_plot(profiles)
        four_gpu_plot = fourgpu.plan_plot(fourgpu.layout_rows(runs, by_commit))
        model = predicted.checked(runs)
        page = markdown.render(markdown.Page(
            report, Path(os.path.relpath(records_dir, out_dir)).as_posix(), tuple(runs), published,
            tuple(platform_specs), tuple(loss_specs), tuple(profiles), tuple(load_node_checks(smoke_dir)),
            Path(os.path.relpath(smoke_dir, out_dir)).as_posix(), by_commit, four_gpu_plot, model, aims))
        files = {PAGE: page.encode()}
        model_plot = model.plot if model else None
        specs: list[plots.Drawable] = [*platform_specs, *loss_specs, *(
            p for p in (time_plot, four_gpu_plot, model_plot) if p is not None)]
        if drawer is not None:
            plots_dir = out_dir / PLOTS_DIR
            existing = {
                spec.filename: (plots_dir / spec.filename).read_bytes()
                for spec in specs
                if (plots_dir / spec.filename).is_file()
            }
            for spec, png in zip(specs, drawer.reuse_or_render(specs, existing), strict=True):
                files[f"{PLOTS_DIR}/{spec.filename}"] = png
    return Generated(report, files)


def check_out_dir(out_dir: Path) -> None:
    """A ValueError naming ``out_dir`` if it cannot take the page and plots (read-only, a file in
    the way, no permission)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for folder in (out_dir, out_dir / PLOTS_DIR):
            if folder.is_dir():
                tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise ValueError(f"the results cannot be written to {out_dir} "
                         f"({error.strerror or error}); give a writable folder with --out") from None


def write_outputs(out_dir: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write files whose bytes changed and delete PNGs in ``plots/`` no longer generated.

    Returns the paths written or deleted; an unchanged file keeps its modification time. Each
    file is written beside its place under a hidden name and renamed into it, so a failed write
    (a full disk) leaves the old file whole and no hidden file behind.
    """
    changed = []
    for name, data in sorted(files.items()):
        path = out_dir / name
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.tmp")
        try:
            temp.write_bytes(data)
            temp.replace(path)
        except BaseException:  # a full disk or a stop midway: no half-written hidden file stays
            temp.unlink(missing_ok=True)
            raise
        changed.append(path)
    plots_dir = out_dir / PLOTS_DIR
    if plots_dir.is_dir():
        for stale in sorted(plots_dir.glob("*.png")):
            if f"{PLOTS_DIR}/{stale.name}" not in files:
                stale.unlink()
                changed.append(stale)
    return changed
