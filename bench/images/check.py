"""The in-image check that needs no GPU: pinned versions, patches applied, imports.

Run inside a built image: ``python3 -m bench.images.check --target cuda`` (the image's default
command). Imports that need torch are tried only where torch is installed (the real bases); on a
stand-in base without torch they are reported as not checked. Exit status 0 means every check passed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from bench.images.pins import Pins, load_pins
from bench.images.series import SeriesError, distribution_root, run_series

IMAGE_ROOT = Path("/opt/megatron-bench")
TORCH_IMPORTS = {"megatron-core": "megatron.core", "deepspeed": "deepspeed"}


def check(pins: Pins, target_name: str, root: Path = IMAGE_ROOT) -> list[tuple[str, bool, str]]:
    """Return (what, passed, detail) for every check of ``target_name``'s image."""
    target = pins.target(target_name)
    results = []
    for spec in (*target.requirements, *target.packages):
        name, version = spec.split("==")
        try:
            found = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found = "missing"
        results.append((f"version {name}", found == version, f"{found} (pinned {version})"))
    for name in target.upstreams:
        upstream = pins.upstreams[name]
        if not upstream.series:
            continue
        try:
            tree = distribution_root(upstream.package) if upstream.kind == "pypi" else Path(upstream.install_dir)
            lines = run_series(root / upstream.series, tree, "verify-applied")
            results.append((f"patches {name}", True, f"{len(lines)} applied in {tree}"))
        except SeriesError as error:
            results.append((f"patches {name}", False, str(error)))
    if "megatron-deepspeed" in target.upstreams:
        tree = Path(pins.upstreams["megatron-deepspeed"].install_dir)
        helpers = sorted((tree / "megatron" / "data").glob("helpers*.so"))
        results.append(("Megatron-DeepSpeed dataset helpers", bool(helpers),
                         str(helpers[0]) if helpers else f"not built in {tree}/megatron/data"))
        kernels = sorted((tree / "megatron" / "fused_kernels" / "build").glob("*.so"))
        results.append(("Megatron-DeepSpeed fused kernels", True, f"{len(kernels)} built" if kernels
                        else "not built: the base had no torch with a CUDA/ROCm toolkit"))
    results.append(("import bench", importlib.util.find_spec("bench") is not None, "the kit"))
    has_torch = importlib.util.find_spec("torch") is not None
    for spec in target.packages:
        module = TORCH_IMPORTS.get(spec.split("==")[0])
        if module is None:
            continue
        if not has_torch:
            results.append((f"import {module}", True, "not checked: no torch in this base"))
            continue
        try:
            importlib.import_module(module)
            results.append((f"import {module}", True, "imported"))
        except Exception as error:  # any import failure is the finding
            results.append((f"import {module}", False, f"{type(error).__name__}: {error}"))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--pins", type=Path, default=IMAGE_ROOT / "pins.toml",
                        help="pins file (default: the copy baked into the image)")
    args = parser.parse_args(argv)
    results = check(load_pins(args.pins), args.target)
    for what, passed, detail in results:
        print(f"{'ok  ' if passed else 'FAIL'} {what}: {detail}")
    failed = [what for what, passed, _ in results if not passed]
    print("check: ok" if not failed else f"check: FAILED ({', '.join(failed)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
