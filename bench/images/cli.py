"""``python -m bench images ...``: build, push and pull images; check patches; the Polaris recipe."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

from bench.images import container_runtime, polaris, refs, singularity, upstreams
from bench.images.context import BuildContext, assemble, fetch_github_upstream
from bench.images.pins import REPO_ROOT, load_pins, load_polaris_recipe

BUILD_DIR = REPO_ROOT / "build" / "images"
RUNTIMES = ("docker", "enroot", "singularity", "apptainer")


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key or not rest:
            raise ValueError(f"{flag} {value!r}: write it as NAME=VALUE")
        pairs[key] = rest
    return pairs


def _context(args) -> BuildContext:
    pins = load_pins()
    target = pins.target(args.target)
    return assemble(
        pins, target, BUILD_DIR / args.target / "context",
        base=args.base, ca_certs=tuple(Path(p) for p in args.ca_cert),
        upstream_dirs={k: Path(v) for k, v in _pairs(args.upstream, "--upstream").items()},
        options=_pairs(args.option, "--option"),
    )


def cmd_build(args) -> int:
    context = _context(args)
    result = container_runtime.build(context, force=args.force, network_mode=args.network,
                                    builder=args.builder)
    print(f"image: {result.tag}")
    if args.target == "rocm":
        definition = singularity.render_definition(context.dockerfile, context.buildargs)
        def_path = context.directory / "megatron-bench-rocm.def"
        def_path.write_text(definition)
        print(f"Singularity definition: {def_path}")
        # Where platforms/lumi.toml's image points: this file in the directory jobs run from.
        sif = refs.image_file(load_pins().target(args.target), "singularity")
        for program in ("apptainer", "singularity"):
            argv = [program, "build", "--fakeroot", str(Path.cwd() / sif), def_path.name]
            if container_runtime.shutil.which(program):
                print("$ (cd " + shlex.quote(str(context.directory)) + " && " + shlex.join(argv) + ")")
                container_runtime.subprocess_run(argv, cwd=context.directory)
                print(refs.for_jobs(sif, Path.cwd()))
                break
        else:
            print(f"not built: no apptainer/singularity here; on LUMI run in {context.directory}:\n"
                  f"  singularity build --fakeroot megatron-bench-rocm.sif {def_path.name}\n"
                  "and keep the .sif in the directory you submit from (lumi's default image)")
    print(f"to run it on a cluster, push it to a registry the cluster can reach:\n"
          f"  nox -s push -- {args.target} --registry HOST/OWNER   (with the same build options)")
    return 0


def cmd_push(args) -> int:
    context = _context(args)
    registry = args.registry or load_pins().target(args.target).registry
    pushed = container_runtime.push(context.tag, registry, extra_tags=tuple(args.also_tag))
    for each in pushed:
        print(f"pushed {each.pinned}")
    print(refs.for_jobs(refs.pyxis_reference(pushed[0].reference)) + " (pyxis; Singularity: "
          f"singularity pull megatron-bench-{args.target}.sif docker://{pushed[0].reference})")
    return 0


# A registry's words for "no such image or tag" (docker, enroot and Singularity pass them on).
_NOT_FOUND = re.compile(r"manifest unknown|not found|name unknown|does not exist|denied", re.I)


def _nothing_to_pull(reference: str, target: str) -> container_runtime.ContainerRuntimeError:
    """One line for a pull that found no image: releases are made by tag (docs/images.md)."""
    return container_runtime.ContainerRuntimeError(
        f"{reference} was not found: no release of it is published there (releases are made by "
        f"v* tags, docs/images.md#releases); build it with `nox -s build-{target}` and push it "
        f"with `nox -s push -- {target} --registry HOST/OWNER`, then pull with --registry")


def cmd_pull(args) -> int:
    target = load_pins().target(args.target)
    reference = refs.registry_reference(target, args.registry, args.tag)
    if args.runtime == "docker":
        try:
            image_id = container_runtime.pull(reference)
        except container_runtime.ContainerRuntimeError as error:
            if _NOT_FOUND.search(str(error)):
                raise _nothing_to_pull(reference, args.target) from None
            raise
        print(f"pulled {reference}: {image_id}")
        print(refs.for_jobs(refs.pyxis_reference(reference)) + " (pyxis pulls it at job start)")
        return 0
    output = refs.image_file(target, args.runtime, args.tag)
    argv = container_runtime.runtime_pull_command(args.runtime, reference, output)
    try:
        ran = container_runtime.run_if_present(argv)
    except subprocess.CalledProcessError:  # the tool said why above; this says what to do
        raise _nothing_to_pull(reference, args.target) from None
    if not ran:
        raise container_runtime.ContainerRuntimeError(
            f"nothing was pulled: {argv[0]} is not installed here; run the command above where it is "
            "(the cluster's login node)")
    if not Path(output).exists():
        raise container_runtime.ContainerRuntimeError(
            f"{argv[0]} finished but {output} is not there: nothing was pulled")
    print(f"pulled {reference} into {Path.cwd() / output}")
    print(refs.for_jobs(output, Path.cwd()))
    return 0


def cmd_singularity(args) -> int:
    context = _context(args)
    sys.stdout.write(singularity.render_definition(context.dockerfile, context.buildargs))
    return 0


def cmd_patches(args) -> int:
    dirs = {k: Path(v) for k, v in _pairs(args.upstream, "--upstream").items()}
    lines, ok = upstreams.check_all(load_pins(), dirs)
    print("\n".join(lines))
    return 0 if ok else 1


def cmd_polaris(args) -> int:
    pins, recipe = load_pins(), load_polaris_recipe()
    execute = polaris.module_command_exists() and not args.dry_run
    upstream = pins.upstreams[recipe.upstream]
    if args.upstream_dir:
        tree = args.upstream_dir
    elif execute:
        tree = str(fetch_github_upstream(upstream))
    else:
        tree = f"<{upstream.pin} unpacked>"
    return polaris.run(polaris.render_script(recipe, pins, tree), execute)


def _runtime_errors(command):
    """Report a runtime's refusal as one error message and exit status 1."""
    def guarded(args) -> int:
        try:
            return command(args)
        except container_runtime.ContainerRuntimeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return guarded


def _build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="image target in images/pins.toml (cuda, rocm)")
    parser.add_argument("--base", help="base image instead of the pinned one (default: pinned)")
    parser.add_argument("--ca-cert", action="append", default=[], metavar="PATH",
                        help="extra CA certificate to trust in the build (repeatable)")
    parser.add_argument("--upstream", action="append", default=[], metavar="NAME=PATH",
                        help="local tree or source archive (.tar.gz) of a GitHub upstream "
                        "instead of fetching its pinned commit")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="build option (repeatable): msamp=1 adds MS-AMP (default: msamp=0); "
                        "msamp_arch=ARCHS its CUDA extensions' TORCH_CUDA_ARCH_LIST (default: 9.0)")


def register(subparsers) -> None:
    """Add the ``images`` subcommand to the kit's command line."""
    images = subparsers.add_parser("images", help="build, push and pull the kit's images")
    actions = images.add_subparsers(dest="action", required=True)

    build = actions.add_parser("build", help="build an image (skipped when its inputs are unchanged)")
    _build_options(build)
    build.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    build.add_argument("--network", help="network of the RUN steps, e.g. host (default: the "
                       "runtime's bridge)")
    build.add_argument("--builder", choices=container_runtime.BUILDERS, default="auto",
                       help="BuildKit or the classic builder (default auto: BuildKit where the "
                       "runtime has it, i.e. dockerd; the classic one on podman)")
    build.set_defaults(func=_runtime_errors(cmd_build))

    push = actions.add_parser("push", help="push the image of the current inputs")
    _build_options(push)
    push.add_argument("--registry", help="host[:port]/owner (default: the target's registry)")
    push.add_argument("--also-tag", action="append", default=[], help="extra tag, e.g. 0.1.0")
    push.set_defaults(func=_runtime_errors(cmd_push))

    pull = actions.add_parser("pull", help="pull a prebuilt image through a platform runtime")
    pull.add_argument("target")
    pull.add_argument("--runtime", choices=RUNTIMES, default="docker")
    pull.add_argument("--registry", help="host[:port]/owner (default: the target's registry)")
    pull.add_argument("--tag", default="latest",
                      help="image tag, or a digest sha256:... (default: latest)")
    pull.set_defaults(func=_runtime_errors(cmd_pull))

    definition = actions.add_parser("singularity", help="print the Singularity definition")
    _build_options(definition)
    definition.set_defaults(func=cmd_singularity)

    patches = actions.add_parser("patches", help="check each patch series against its pinned source")
    patches.add_argument("--upstream", action="append", default=[], metavar="NAME=PATH",
                         help="local tree or source archive (.tar.gz) of a GitHub upstream")
    patches.set_defaults(func=cmd_patches)

    polaris_cmd = actions.add_parser("polaris", help="render (and on Polaris run) the venv recipe")
    polaris_cmd.add_argument("--dry-run", action="store_true", help="print only, even on Polaris")
    polaris_cmd.add_argument("--upstream-dir", help="unpacked Megatron-DeepSpeed at the pinned commit")
    polaris_cmd.set_defaults(func=cmd_polaris)


