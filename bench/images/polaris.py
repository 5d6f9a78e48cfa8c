"""The Polaris recipe (conda module + venv, no container) rendered as one bash script.

Polaris users extend the site's conda module with a venv that sees its torch
(``--system-site-packages``), as in the Polaris seed. ``module load`` changes the shell it runs in,
so the steps are one script; it runs only where the ``module`` command exists (a Polaris login
node) and is printed everywhere else.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from bench.images.pins import REPO_ROOT, Pins, PolarisRecipe

MIN_PYTHON = (3, 11)  # the kit's requires-python


def render_script(recipe: PolarisRecipe, pins: Pins, upstream_tree: str, root: Path = REPO_ROOT) -> str:
    """The bash script of the recipe. ``upstream_tree`` is the unpacked pinned Megatron-DeepSpeed."""
    upstream = pins.upstreams[recipe.upstream]
    venv_python = f"{recipe.venv}/bin/python3"
    q = shlex.quote
    steps = [
        f"module load {q(recipe.conda_module)}",
        "conda activate base",
        "python3 -c " + q(
            f"import sys; v = sys.version_info[:2]; sys.exit(0 if v >= {MIN_PYTHON} else "
            f"f'the conda module has Python {{v}}; the kit needs >= {MIN_PYTHON}: pick a newer "
            f"conda_module in images/polaris/recipe.toml')"),
        f"mkdir -p {q(str(Path(recipe.venv).parent))}",
        f"python3 -m venv --system-site-packages {q(recipe.venv)}",
        shlex.join([venv_python, "-m", "pip", "install", *recipe.requirements]),
        shlex.join([venv_python, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                    *recipe.packages]),
        f"rm -rf {q(recipe.checkout)} && cp -r {q(upstream_tree)} {q(recipe.checkout)}",
        shlex.join([venv_python, str(root / "bench/images/series.py"), "apply",
                    str(root / upstream.series), recipe.checkout]),
        shlex.join([venv_python, "-m", "pip", "install", "--no-deps", str(root)]),
    ]
    header = [
        "#!/bin/bash",
        f"# Polaris environment for the kit: {recipe.conda_module} + venv {recipe.venv};",
        f"# {recipe.checkout} is {upstream.pin} with patches/{Path(upstream.series).parent.name}.",
        "set -euo pipefail",
    ]
    return "\n".join(header + steps) + "\n"


def module_command_exists() -> bool:
    """Whether environment modules are set up here (Lmod or Tcl modules)."""
    if os.environ.get("LMOD_CMD") or os.environ.get("MODULESHOME"):
        return True
    probe = subprocess.run(["bash", "-lc", "type module"], capture_output=True)
    return shutil.which("bash") is not None and probe.returncode == 0


def run(script: str, execute: bool) -> int:
    """Print ``script``; run it with a login bash when ``execute``. Returns its exit status."""
    print(script, end="")
    if not execute:
        print("# dry run: `module` is not available on this machine, nothing was executed")
        return 0
    return subprocess.run(["bash", "-lc", script]).returncode
