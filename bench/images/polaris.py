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


def _version(text: str) -> tuple[int, ...]:
    """``"2.14.0"`` -> (2, 14, 0); a local or pre-release suffix (``2.1.0a0+git``) is dropped."""
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def check_module(recipe: PolarisRecipe) -> None:
    """Refuse a conda module whose Python or torch the pins do not accept, naming both versions.

    The facts come from the recipe's ``[conda_modules]`` table; a module it does not describe is
    refused too, since nothing could then be checked before a build on Polaris.
    """
    where = "images/polaris/recipe.toml"
    facts = recipe.conda_modules.get(recipe.conda_module)
    if facts is None:
        raise ValueError(f"{where}: conda_module {recipe.conda_module} has no [conda_modules] entry "
                         "saying which Python and torch it ships; add one with its source")
    deepspeed = next((p for p in recipe.packages if p.startswith("deepspeed==")), "deepspeed")
    need_torch, need_python = recipe.requires["torch"], recipe.requires["python"]
    if _version(facts.torch) < _version(need_torch):
        raise ValueError(f"{recipe.conda_module} ships torch {facts.torch}, but {deepspeed} needs "
                         f"torch >= {need_torch}: choose a newer conda_module in {where}")
    if facts.python and _version(facts.python) < _version(need_python):
        raise ValueError(f"{recipe.conda_module} ships Python {facts.python}, but the kit needs "
                         f"Python >= {need_python}: choose a newer conda_module in {where}")


def render_script(recipe: PolarisRecipe, pins: Pins, upstream_tree: str, root: Path = REPO_ROOT) -> str:
    """The bash script of the recipe. ``upstream_tree`` is the unpacked pinned Megatron-DeepSpeed.

    The module is checked first (``check_module``); the script checks again on Polaris what the
    module really ships, since a module can change under the same name.
    """
    check_module(recipe)
    upstream = pins.upstreams[recipe.upstream]
    venv_python = f"{recipe.venv}/bin/python3"
    q = shlex.quote
    need = {key: _version(value) for key, value in recipe.requires.items()}
    # Run on Polaris in the module's Python: what the module really ships, against the pins.
    probe = (
        "import sys, torch; v = sys.version_info[:2]; "
        "t = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); "
        f"v < {need['python']} and sys.exit(f'{recipe.conda_module} has Python {{v[0]}}.{{v[1]}}; "
        f"the kit needs >= {recipe.requires['python']}: choose a newer conda_module'); "
        f"t < {need['torch'][:2]} and sys.exit(f'{recipe.conda_module} has torch "
        f"{{torch.__version__}}; the pinned DeepSpeed needs >= {recipe.requires['torch']}: "
        "choose a newer conda_module')")
    if recipe.flash_attention:
        probe += ("; import importlib.util as u; u.find_spec('flash_attn') or sys.exit("
                  f"'{recipe.conda_module} has no flash_attn, which platforms/polaris.toml "
                  "(flash_attention = true) relies on: set it to false there')")
    steps = [
        *([f"module use {q(recipe.module_path)}"] if recipe.module_path else []),
        f"module load {q(recipe.conda_module)}",
        "conda activate base",
        "python3 -c " + q(probe),
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
