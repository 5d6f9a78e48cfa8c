"""The GPU machine's builds from a wheelhouse (:mod:`bench.running.airgap`), as data, and their cache.

Each build installs into a folder of its own, ``<cache>/builds/<name>/site``, with the Python that
trains first on PATH (the venv sees the machine's torch); what each does is what the GPU machines of
``docs/reports/`` ran by hand:

- ``data``: the data step's tokenizers (tiktoken, tokie), no compiler;
- ``te``: Transformer Engine's library wheel and meta package, and its torch extension compiled for
  the GPU's architecture (90-110 s on 16 cores seen);
- ``apex``: NVIDIA apex with its C++ and CUDA extensions (Megatron's fused kernels and
  gradient-accumulation fusion);
- ``msamp``: MS-AMP with the kit's patch series, as the CUDA image builds it
  (``images/cuda/build-msamp.sh``; 218-228 s seen), and colorlog;
- ``mds``: DeepSpeed from its sdist (no ops built) and Megatron-DeepSpeed with its series, its data
  helpers and fused kernels, in the platform's ``megatron_deepspeed_dir``.

A build is made again only when its stamp changes (:meth:`bench.running.airgap.Build.stamp`); the
stamp is written last, so a build that failed half way is made again. The compiles need a CUDA
toolkit and a GPU's torch: they are tested here by their rendered commands (a golden file), the
cache by real builds that need no compiler.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.config.paths import KIT_ROOT
from bench.running.airgap import BUILDS, PTH, TE_VERSION, Build, Log, Step

REPO = KIT_ROOT  # images/ and patches/: a source checkout's
SERIES = REPO / "bench" / "images" / "series.py"
TORCH_PROBE = "import sys, torch; print(torch.__version__, '%d.%d' % sys.version_info[:2])"
ARCH_PROBE = "import torch; print('%d.%d' % torch.cuda.get_device_capability())"
FUSED_KERNELS = ("import types\nfrom megatron import fused_kernels\n"
                 "fused_kernels.load(types.SimpleNamespace(masked_softmax_fusion=True, rank=0))")


def _one(files: Sequence[str], pattern: str, wheelhouse: Path) -> Path:
    found = [name for name in files if fnmatch.fnmatch(name, pattern)]
    if len(found) != 1:
        raise ValueError(f"the wheelhouse {wheelhouse} holds {len(found)} files {pattern}, not one; "
                         f"gather it again: `nox -s wheelhouse -- cuda --dest {wheelhouse}`")
    return wheelhouse / found[0]


def _patches(name: str) -> tuple[Path, ...]:
    return tuple(sorted((REPO / "patches" / name).iterdir()))


def _te(files: Sequence[str], w: Path, python: str, site: Path, work: Path, arch: str,
        jobs: int) -> Build:
    library = _one(files, f"sources/transformer_engine_cu*-{TE_VERSION}-*.whl", w)
    meta = _one(files, f"sources/transformer_engine-{TE_VERSION}-*.whl", w)
    sdist = _one(files, f"sources/transformer_engine_torch-{TE_VERSION}.tar.gz", w)
    pip = (python, "-m", "pip")
    steps = (
        Step((*pip, "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", str(site),
              str(library))),
        # The meta package's metadata only: its modules are the library wheel's.
        Step((python, "-m", "zipfile", "-e", str(meta), str(work / "meta"))),
        Step(("sh", "-c", 'cp -r "$0"/*.dist-info "$1"/', str(work / "meta"), str(site))),
        Step((*pip, "wheel", "-q", "--no-build-isolation", "--no-deps", "--no-index", "-w",
              str(work / "wheel"), str(sdist)),
             (("NVTE_CUDA_ARCHS", arch.replace(".", "")), ("MAX_JOBS", str(jobs)),
              ("NVTE_FRAMEWORK", "pytorch"), ("PYTHONPATH", str(site)))),
        # Unpacked, not pip-installed: pip --target would skip transformer_engine/, already there.
        Step(("sh", "-c", 'exec "$0" -m zipfile -e "$1"/transformer_engine_torch-*.whl "$2"', python,
              str(work / "wheel"), str(site))),
        Step((python, "-c", "import transformer_engine.pytorch, transformer_engine as t; "
              "print('Transformer Engine', t.__version__)"), (("PYTHONPATH", str(site)),)),
    )
    return Build("te", (library, meta, sdist), steps, site)


def _apex(files: Sequence[str], w: Path, python: str, site: Path, work: Path, arch: str,
          jobs: int) -> Build:
    archive = _one(files, "sources/apex-*.tar.gz", w)
    src = work / "src"
    steps = (
        Step(("mkdir", "-p", str(src))),
        Step(("tar", "-xzf", str(archive), "-C", str(src), "--strip-components", "1")),
        Step((python, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "--no-index",
              "-w", str(work / "wheel"), str(src)),
             (("TORCH_CUDA_ARCH_LIST", arch), ("APEX_CPP_EXT", "1"), ("APEX_CUDA_EXT", "1"),
              ("APEX_PARALLEL_BUILD", str(jobs)), ("NVCC_APPEND_FLAGS", "--threads 2"))),
        Step((python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--find-links",
              str(work / "wheel"), "--target", str(site), "apex")),
    )
    return Build("apex", (archive,), steps, site)


def _msamp(files: Sequence[str], w: Path, python: str, site: Path, work: Path, arch: str,
           jobs: int) -> Build:
    archive = _one(files, "sources/ms-amp-*.tar.gz", w)
    colorlog = _one(files, "colorlog-*.whl", w)
    script = REPO / "images" / "cuda" / "build-msamp.sh"
    src = work / "src"
    steps = (
        Step((python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
              str(colorlog))),
        Step(("mkdir", "-p", str(src))),
        Step(("tar", "-xzf", str(archive), "-C", str(src), "--strip-components", "1")),
        # build-msamp.sh runs series.py from its own folder, as in the image.
        Step(("cp", str(script), str(SERIES), str(work))),
        Step(("sh", str(work / "build-msamp.sh"), str(src), str(REPO / "patches" / "ms-amp" / "series"), arch),
             (("PIP_TARGET", str(site)), ("PYTHONPATH", str(site)), ("MAX_JOBS", str(jobs)))),
    )
    return Build("msamp", (archive, colorlog, script, SERIES, *_patches("ms-amp")), steps, site)


def _mds(files: Sequence[str], w: Path, python: str, site: Path, tree: Path) -> Build:
    deepspeed = _one(files, "sources/deepspeed-*.tar.gz", w)
    archive = _one(files, "sources/megatron-deepspeed-*.tar.gz", w)
    helpers = ('make -C "$1/megatron/data" CPPFLAGS="$("$0" -m pybind11 --includes)" LIBEXT="$("$0" '
               "-c 'import sysconfig; print(sysconfig.get_config_var(\"EXT_SUFFIX\"))')\"")
    steps = (
        Step((python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation",
              "--target", str(site), str(deepspeed)), (("DS_BUILD_OPS", "0"), ("PYTHONPATH", str(site)))),
        Step(("rm", "-rf", str(tree))),
        Step(("mkdir", "-p", str(tree))),
        Step(("tar", "-xzf", str(archive), "-C", str(tree), "--strip-components", "1")),
        Step((python, str(SERIES), "apply", str(REPO / "patches" / "megatron-deepspeed" / "series"), str(tree))),
        Step(("sh", "-c", helpers, python, str(tree))),
        Step((python, "-c", FUSED_KERNELS), (("PYTHONPATH", str(site)),), str(tree)),
    )
    return Build("mds", (deepspeed, archive, SERIES, *_patches("megatron-deepspeed")), steps, site,
                 outside=(tree / "pretrain_gpt.py",))


def recipes(wheelhouse: Path, files: Sequence[str], python: str, cache: Path, arch: str,
            jobs: int, mds_dir: Path) -> dict[str, Build]:
    """Every build of :data:`BUILDS` the wheelhouse can make, by name (those it lacks inputs for:
    left out)."""
    made: dict[str, Build] = {}
    for name in BUILDS:
        site, work = cache / name / "site", cache / name / "work"
        try:
            if name == "data":
                wheels = [_one(files, f"{spec.split('==')[0]}-*.whl", wheelhouse)
                          for spec in ("tiktoken==", "tokie==")]
                made[name] = Build(name, tuple(wheels), (Step((
                    python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                    str(site), *map(str, wheels))),), site)
            elif name == "mds":
                made[name] = _mds(files, wheelhouse, python, site, mds_dir)
            else:
                recipe = {"te": _te, "apex": _apex, "msamp": _msamp}[name]
                made[name] = recipe(files, wheelhouse, python, site, work, arch, jobs)
        except ValueError:
            continue
    return made


def probe_torch(python: str) -> tuple[str, str]:
    """(torch's version or "none", the Python's major.minor) of ``python``."""
    done = subprocess.run([python, "-c", TORCH_PROBE], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        torch, version = done.stdout.split()
        return torch, version
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return "none", version


def make(build: Build, python: str, arch: str, log: Log = print) -> bool:
    """Make ``build`` unless its stamp says it is made already; True when it was made now."""
    torch, version = probe_torch(python)
    key = build.stamp(torch, version, arch)
    stamp = build.site.parent / ".stamp"
    if (stamp.is_file() and stamp.read_text().strip() == key and build.site.is_dir()
            and all(path.exists() for path in build.outside)):
        log(f"{build.name}: built already (stamp {key[:16]})")
        return False
    stamp.unlink(missing_ok=True)
    for folder in (build.site, build.site.parent / "work"):
        shutil.rmtree(folder, ignore_errors=True)
    build.site.mkdir(parents=True)
    # The training Python's folder first on PATH: build-msamp.sh and pip's builds call python3.
    path = {**os.environ, "PATH": os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")])}
    log(f"{build.name}: building (stamp {key[:16]}: torch {torch}, Python {version}, arch {arch})")
    for number, step in enumerate(build.steps, 1):
        log(f"{build.name} [{number}/{len(build.steps)}] {step.render()}")
        done = subprocess.run(step.argv, env={**path, **dict(step.env)}, cwd=step.cwd or None,
                              check=False)
        if done.returncode != 0:
            raise ValueError(f"the {build.name} build failed at step {number} (exit "
                             f"{done.returncode}, its output above): {step.render()}")
    stamp.write_text(key + "\n")
    return True


def put_on_path(python: str, sites: Sequence[Path]) -> Path:
    """Write the venv's ``.pth`` file naming ``sites`` (after its own packages); none: removed."""
    site_packages = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    pth = Path(site_packages) / PTH
    if sites:
        pth.write_text("".join(f"{site}\n" for site in sites))
    else:
        pth.unlink(missing_ok=True)
    return pth


def provide(names: Sequence[str], wheelhouse: Path, python: str, cache: Path, arch: str | None,
            jobs: int, mds_dir: Path, log: Log = print) -> list[Path]:
    """Make (or reuse) the builds ``names`` from ``wheelhouse`` and put them on ``python``'s path."""
    from bench.running.airgap import read_manifest

    if unknown := [name for name in names if name not in BUILDS]:
        raise ValueError(f"--builds {unknown[0]}: not one of {', '.join(BUILDS)}")
    files = list(read_manifest(wheelhouse)["files"])  # type: ignore[call-overload]
    arch = arch or gpu_arch(python, names)
    made = recipes(wheelhouse, files, python, cache, arch, jobs, mds_dir)
    if lacking := [name for name in names if name not in made]:
        raise ValueError(f"the wheelhouse {wheelhouse} lacks the sources of the {lacking[0]} build "
                         f"(its manifest's missing: {read_manifest(wheelhouse)['missing']}); gather "
                         "them with `nox -s wheelhouse -- cuda --dest DIR --upstream NAME=PATH`")
    for name in names:
        make(made[name], python, arch, log)
    return [made[name].site for name in names]


def gpu_arch(python: str, names: Sequence[str]) -> str:
    """The first GPU's compute capability as torch reads it ("9.0"); "" when no build compiles."""
    if set(names) <= {"data"}:
        return ""
    done = subprocess.run([python, "-c", ARCH_PROBE], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"{python} sees no GPU to build for; give --arch (9.0 for H100 and H200, "
                         "8.0 for A100)")
    return done.stdout.strip()
