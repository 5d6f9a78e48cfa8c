"""Check every patch series against its pinned upstream source (``nox -s patches``).

PyPI upstreams are downloaded with pip (wheel, no dependencies) and unpacked; GitHub upstreams are
fetched as the commit's archive, or taken from ``--upstream NAME=PATH`` (a tree, or the commit's
source archive, as CI passes its snapshots). A series that cannot be checked
(GitHub unreachable and no ``--upstream``) is reported as NOT CHECKED and fails the check: an
unchecked series is not known to apply. Each patch must apply exactly: no offset, no fuzz.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench.images.context import DEFAULT_CACHE, fetch_github_upstream, local_upstream
from bench.images.pins import REPO_ROOT, Pins, Upstream
from bench.images.series import SeriesError, read_series, run_series


def pypi_tree(upstream: Upstream, cache: Path = DEFAULT_CACHE) -> Path:
    """The unpacked wheel of a pinned PyPI upstream (its files as pip installs them)."""
    tree = cache / f"{upstream.package}-{upstream.version}"
    if tree.is_dir():
        return tree
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "--python-version", "3.12", "--dest", scratch, upstream.pin],
            check=True, stdout=subprocess.DEVNULL,
        )
        (wheel,) = Path(scratch).glob("*.whl")
        partial = tree.with_name(f".{tree.name}.partial")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(partial)
        partial.rename(tree)
    return tree


def check_all(pins: Pins, upstream_dirs: dict[str, Path], root: Path = REPO_ROOT) -> tuple[list[str], bool]:
    """Dry-run every series on its pinned source. Returns (report lines, all checked ones apply)."""
    unknown = sorted(set(upstream_dirs) - set(pins.upstreams))
    if unknown:
        raise ValueError(f"--upstream {', '.join(unknown)}: no such upstream in images/pins.toml "
                         f"(known: {', '.join(sorted(pins.upstreams))})")
    lines, ok = [], True
    for name, upstream in sorted(pins.upstreams.items()):
        if not upstream.series:
            lines.append(f"{name} ({upstream.pin}): no patch series")
            continue
        series = root / upstream.series
        count = len(read_series(series))
        if count == 0:
            lines.append(f"{name} ({upstream.pin}): series is empty (see {upstream.series})")
            continue
        try:
            if name in upstream_dirs:
                tree = local_upstream(upstream, upstream_dirs[name])
            elif upstream.kind == "pypi":
                tree = pypi_tree(upstream)
            else:
                tree = fetch_github_upstream(upstream)
        except (ValueError, subprocess.CalledProcessError) as error:
            ok = False
            lines.append(f"{name} ({upstream.pin}): {count} patch(es) NOT CHECKED here: {error}")
            continue
        try:
            run_series(series, tree, "check")
            lines.append(f"{name} ({upstream.pin}): {count} patch(es) apply exactly to {tree}")
        except SeriesError as error:
            ok = False
            lines.append(f"{name} ({upstream.pin}): FAILED\n{error}")
    return lines, ok
