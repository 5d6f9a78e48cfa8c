"""Apply or check one patch series with GNU patch.

Standard library only: the image build copies this file into its context and runs it with the
base's Python before the kit is installed. A series file lists patch file names, one a line, in
order; ``#`` starts a comment. Patches apply with ``-p1 --fuzz=0`` so a changed upstream fails loudly
instead of applying somewhere else; on failure patch's own output names the file and the hunk. A
hunk that lands at an offset fails too: its line numbers were not made against this tree.

Usage: ``python3 series.py apply|check|verify-applied SERIES_FILE (DIR | --dist DISTRIBUTION)``
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PATCH_FLAGS = ("-p1", "--forward", "--batch", "--fuzz=0", "--no-backup-if-mismatch")


class SeriesError(Exception):
    """A patch of a series does not apply (or is not applied) to its upstream tree."""


def read_series(series_file: Path) -> list[Path]:
    """Return the patch files a series names, in order (paths beside the series file)."""
    if not series_file.is_file():
        raise SeriesError(f"{series_file}: no such series file; create it (it may list no patch)")
    patches = []
    for number, raw in enumerate(series_file.read_text().splitlines(), start=1):
        name = raw.split("#", 1)[0].strip()
        if not name:
            continue
        path = series_file.parent / name
        if not path.is_file():
            raise SeriesError(f"{series_file}:{number}: names {name}, which does not exist beside it")
        patches.append(path)
    return patches


def _patch(patch_file: Path, tree: Path, extra: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["patch", "-d", str(tree), *PATCH_FLAGS, *extra, "-i", str(patch_file.resolve())],
        capture_output=True, text=True,
    )


def run_series(series_file: Path, tree: Path, mode: str) -> list[str]:
    """Apply (``apply``), dry-run (``check``) or confirm applied (``verify-applied``) a series.

    ``check`` dry-runs each patch on a scratch copy, so later patches see earlier ones. Returns one
    line per patch; raises SeriesError naming the series, the patch and patch's report.
    """
    if not tree.is_dir():
        raise SeriesError(f"{tree}: upstream tree not found for series {series_file}")
    patches = read_series(series_file)
    if mode == "check" and patches:
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "tree"
            shutil.copytree(tree, copy, symlinks=True)
            return run_series(series_file, copy, "apply")
    if mode == "verify-applied" and patches:
        return _verify_applied(series_file, patches, tree)
    report = []
    for patch_file in patches:
        done = _patch(patch_file, tree, ())
        if done.returncode == 0 and mode == "apply" and "(offset " in done.stdout:
            raise SeriesError(f"{series_file}: {patch_file.name} applies to {tree} only at an "
                              f"offset; regenerate it against this tree:\n{done.stdout}")
        if done.returncode != 0:
            raise SeriesError(f"{series_file}: {patch_file.name} does not apply to {tree}:\n"
                              f"{done.stdout}{done.stderr}")
        report.append(f"{patch_file.name}: applied")
    return report


def _touched_files(patches: list[Path]) -> set[str]:
    """The tree-relative paths (``-p1``) that a series' patches change."""
    names = set()
    for patch_file in patches:
        for line in patch_file.read_text(errors="replace").splitlines():
            if line.startswith(("--- ", "+++ ")):
                name = line[4:].split("\t")[0].strip()
                if name != "/dev/null" and "/" in name:
                    names.add(name.split("/", 1)[1])
    return names


def _verify_applied(series_file: Path, patches: list[Path], tree: Path) -> list[str]:
    """Undo the series, last patch first, on a copy of the files it touches.

    Patches may change the same file (a later one's context holds an earlier one's lines), so each
    is reversed against the tree as it stood right after it was applied, never the final tree.
    """
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "tree"
        copy.mkdir()
        for name in _touched_files(patches):
            if (tree / name).is_file():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(tree / name, copy / name)
        for patch_file in reversed(patches):
            done = _patch(patch_file, copy, ("--reverse",))
            if done.returncode != 0:
                raise SeriesError(f"{series_file}: {patch_file.name} is not applied in {tree}:\n"
                                  f"{done.stdout}{done.stderr}")
    return [f"{patch_file.name}: ok" for patch_file in patches]


def distribution_root(name: str) -> Path:
    """The directory a pip-installed distribution's files are relative to (its site-packages)."""
    try:
        return Path(importlib.metadata.distribution(name).locate_file(""))
    except importlib.metadata.PackageNotFoundError:
        raise SeriesError(f"distribution {name} is not installed; install it before patching") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("apply", "check", "verify-applied"))
    parser.add_argument("series", type=Path)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("dir", nargs="?", type=Path)
    where.add_argument("--dist", help="patch the files of this installed distribution")
    args = parser.parse_args(argv)
    try:
        tree = distribution_root(args.dist) if args.dist else args.dir
        lines = run_series(args.series, tree, args.mode)
    except SeriesError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.series}: {len(lines)} patch(es) {args.mode} in {tree}")
    for line in lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
