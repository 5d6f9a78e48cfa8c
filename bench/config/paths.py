"""Where the kit's files are: the one place that knows.

The kit's data (platform, accelerator and performance files; the step-time fit) travels with the
package: a wheel carries the checkout's ``platforms/`` as ``bench/platforms`` (``setup.py`` maps one
onto the other), the step-time fit in ``platforms/performance/fit.json`` with them. A source checkout reads its own
``platforms/`` at its root, the folder its users edit. Image recipes, patch series, JSON schemas and
the records exist in a checkout only, under :data:`KIT_ROOT`. A user's own platform and accelerator
files live in a folder named by ``BENCH_PLATFORMS_DIR`` (:func:`platforms_dirs`).

Standard library only: ``bench.train.smoke`` reads the local platform's environment in a training
Python that may lack pydantic.
"""

from __future__ import annotations

from pathlib import Path

from bench.config.environment import env_value

PACKAGE = Path(__file__).resolve().parents[1]
# The folder that holds the ``bench`` package: the checkout's root, or an install's site-packages.
# A child Python puts it on its path to import the kit the parent runs.
KIT_ROOT = PACKAGE.parent
# The source checkout the kit runs from, or None for an installed wheel: site-packages has no
# pyproject.toml beside the package (and may sit inside someone else's git repository, whose
# commit is not the kit's).
CHECKOUT: Path | None = KIT_ROOT if (KIT_ROOT / "pyproject.toml").is_file() else None
PLATFORMS_DIR = (CHECKOUT or PACKAGE) / "platforms"
PERFORMANCE_DIR = PLATFORMS_DIR / "performance"
FIT_FILE = PERFORMANCE_DIR / "fit.json"  # the step-time model's fit, beside the ceilings it divides by


def platforms_dirs() -> list[Path]:
    """The kit's platforms folder, then the user's ``BENCH_PLATFORMS_DIR`` (later ones win)."""
    user = env_value("BENCH_PLATFORMS_DIR")
    if not user or Path(user).resolve() == PLATFORMS_DIR:
        return [PLATFORMS_DIR]
    return [PLATFORMS_DIR, Path(user)]


def platform_file(name: str) -> Path:
    """The file of platform ``name``: the user's where ``BENCH_PLATFORMS_DIR`` has one, else the kit's
    (which may not exist: the caller's read names it)."""
    return next((path for folder in reversed(platforms_dirs()) if (path := folder / f"{name}.toml").is_file()),
                PLATFORMS_DIR / f"{name}.toml")
