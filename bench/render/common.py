"""Pieces shared by the job-script renderers: header comment, environment, launch lines."""

from __future__ import annotations

import re
import shlex

from bench.config.platforms import LIBRARY_DIR
from bench.config.run_options import BY_NAME
from bench.planning.checks import ACCOUNT_PLACEHOLDER
from bench.planning.plan import LaunchPlan
from bench.planning.predict.expect import expected_line
from bench.render.shell import Token, directive_value, export_lines, join

END_MARKER = "BENCH_END status="  # the last line a job prints; jobs tooling reads it
# bench.running.provenance.IMAGE_DIGEST_LINE reads what these lines print.
_PINNED = re.compile(r"@(?P<digest>sha256:[0-9a-f]{64})$")
# The typed settings a measured default may set beside the layout's micro-batch (the header names
# that) and the recompute (the flags show it): shown as typed, their defaults included.
SHOWN_SETTINGS = ("cuda_graphs", "dropout")


def account(plan: LaunchPlan) -> str:
    """The job's account; where the site needs one and none was given, the placeholder a dry run
    shows (a submit is refused before any script is written)."""
    job = plan.platform.job
    return job.account or (ACCOUNT_PLACEHOLDER if job.account_required else "")


def shown(value: str) -> str:
    """A directive's value as the script writes it: the placeholder bare, so it reads as one."""
    return value if value == ACCOUNT_PLACEHOLDER else directive_value(value)


def header(plan: LaunchPlan) -> list[str]:
    lay = plan.layout
    return [
        f"# megatron-bench-kit run {plan.run_id}",
        f"# preset {plan.preset.name}, layout {lay.name} (mbs {lay.micro_batch}, gbs "
        f"{lay.global_batch}), {plan.engine}, {plan.precision.name}, {plan.nodes} node(s) x "
        f"{plan.gpus_per_node} GPU(s) on {plan.platform.name}",
        settings_line(plan),
        *(f"# {line}" for line in [expected_line(plan.expected, plan.expected_none_why)] if line),
    ]


def settings_line(plan: LaunchPlan) -> str:
    """``# settings: --cuda-graphs none --dropout 0.1``: :data:`SHOWN_SETTINGS` that apply to the
    plan's engine, as the run would type them (read from the plan's variant through the run-option
    table; a setting not in it is at its default)."""
    chosen = dict(plan.variant)
    options = [BY_NAME[name] for name in SHOWN_SETTINGS]
    words = [f"{o.flag} {chosen.get(o.variant or '', o.variant_text(o.field_default))}"
             for o in options if o.engine in (None, plan.engine)]
    return "# settings: " + " ".join(words)


def environment(plan: LaunchPlan, master_addr: str) -> list[str]:
    """Module loads, set-up lines, exports, and the rendezvous address (scheduler-made text)."""
    lines = [join(["module", "use", path]) for path in plan.platform.module_paths]
    if plan.platform.modules:
        lines.append(join(["module", "load", *plan.platform.modules]))
    lines += list(plan.platform.setup)  # site set-up lines, written by the platform's author
    if plan.platform.container_runtime == "venv" and plan.image:
        lines.append(join(["source", f"{plan.image}/bin/activate"]))
    lines += library_path_lines(plan)
    unset = plan.platform.unset_for(plan.engine)
    if unset:
        lines.append(join(["unset", *unset]))
    lines += export_lines(plan.env)
    lines.append(f"export MASTER_ADDR={master_addr}")
    return lines


def _library_dir(entry: str) -> str:
    """A library folder as shell text: a leading ``${NAME}`` stays a variable, which must be set."""
    match = LIBRARY_DIR.match(entry)
    assert match, entry  # validated when the platform was loaded
    return _variable(match["var"]) + shlex.quote(match["rest"])


def _variable(var: str | None) -> str:
    return f'"${{{var}:?not set; a module of the platform should set it}}"' if var else ""


def library_path_lines(plan: LaunchPlan) -> list[str]:
    """Put the platform's library folders first on the path the training processes see. A folder
    with a ``*`` is found when the job runs (the newest version, by ``sort -V``), and the job stops
    there if none matches: a site's version folders change under a fixed path."""
    dirs = plan.platform.library_path_for(plan.engine)
    if not dirs:
        return []
    lines, parts = [], []
    for index, entry in enumerate(dirs):
        match = LIBRARY_DIR.match(entry)
        assert match, entry
        if "*" not in match["rest"]:
            parts.append(_library_dir(entry))
            continue
        name = f"BENCH_LIBRARY_DIR_{index}"  # the pattern's characters need no quoting (schema)
        lines.append(f'{name}="$(ls -d {_variable(match["var"])}{match["rest"]} 2>/dev/null '
                     '| sort -V | tail -n 1)"')
        parts.append(f'"${{{name}:?no folder matches {match["rest"]} (library_path)}}"')
    # Singularity passes SINGULARITYENV_X into the container as X; other runtimes see the host's.
    var = ("SINGULARITYENV_LD_LIBRARY_PATH" if plan.platform.container_runtime == "singularity"
           else "LD_LIBRARY_PATH")
    return [*lines, f"export {var}={':'.join(parts)}${{{var}:+:${var}}}"]


def torchrun_tokens(plan: LaunchPlan, rdzv: list[Token]) -> list[Token]:
    """``torchrun`` for one node's GPUs, followed by the training entry and flags."""
    return ["torchrun", f"--nnodes={plan.nodes}", f"--nproc-per-node={plan.gpus_per_node}",
            *rdzv, *plan.entry, *plan.train_args]


def _is_image_file(plan: LaunchPlan) -> bool:
    """pyxis takes a squashfs file for a path starting ``/`` or ``./``; Singularity anything
    without a ``scheme://`` (a ``.sif``, relative to the submit folder)."""
    if plan.platform.container_runtime == "pyxis":
        return plan.image.startswith(("/", "./"))
    return "://" not in plan.image


def image_file_check(plan: LaunchPlan) -> list[str]:
    """Stop before the launcher when the image file the runtime would start is not there, saying
    how to make it (a runtime would otherwise fail on every node, or pull nothing)."""
    if plan.platform.container_runtime not in ("pyxis", "singularity") or not _is_image_file(plan):
        return []
    tool = "enroot" if plan.platform.container_runtime == "pyxis" else "singularity"
    name = plan.image.rpartition("/")[2]
    target = name.removeprefix("megatron-bench-").partition(".")[0].partition("_")[0]
    if not name.startswith("megatron-bench-") or not target:
        target = "<cuda|rocm>"
    message = (f"error: image file {plan.image} not found: pull it in its folder with `nox -s pull "
               f"-- {target} --runtime {tool}` (docs/images.md), or pass --image")
    return [f"if [ ! -f {shlex.quote(plan.image)} ]; then",
            f"  echo {shlex.quote(message)} >&2", f'  echo "{END_MARKER}1"', "  exit 1", "fi"]


DATA_FIX = ("make it with 'python -m bench data ... --out-dir DIR --name NAME' (the prefix is "
            "DIR/NAME_text_document; docs/megatron-deepspeed.md), or pass --data-path")


def data_files(plan: LaunchPlan) -> list[str]:
    """The ``.bin`` and ``.idx`` of the plan's ``--data-path`` as the host sees them (a container's
    bind ``src:dst`` maps ``dst`` back to ``src``; a relative path is the submit folder's); none for
    mock data."""
    if not plan.data_path:
        return []
    prefix = plan.data_path
    if plan.image and plan.platform.container_runtime in ("pyxis", "singularity", "docker"):
        for bind in plan.platform.binds:
            src, _, rest = bind.partition(":")
            dst = (rest.partition(":")[0] or src).rstrip("/")
            if prefix.startswith(dst + "/"):
                prefix = src.rstrip("/") + prefix[len(dst):]
                break
    return [f"{prefix}.bin", f"{prefix}.idx"]


def data_file_check(plan: LaunchPlan) -> list[str]:
    """Stop before the launcher when a data file is not there: every rank would fail on it after
    the job waited in the queue and the image started."""
    files = data_files(plan)
    if not files:
        return []
    message = f"error: data file $file not found: {DATA_FIX}"
    return [f"for file in {' '.join(map(shlex.quote, files))}; do",
            '  if [ ! -f "$file" ]; then', f'    echo "{message}" >&2',
            f'    echo "{END_MARKER}1"', "    exit 1", "  fi", "done"]


def image_digest_lines(plan: LaunchPlan) -> list[str]:
    """The line a container job prints before launch: the digest of the image its runtime starts.

    An image file is hashed on the node at job start (the file the runtime opens, not the one the
    plan meant); a registry reference pinned by ``@sha256:`` is that digest, which the runtime
    verifies when it pulls. A tag names no digest, and pyxis and Singularity do not say which one
    they pulled: the line says so. Runs without a container print nothing.
    """
    if plan.platform.container_runtime not in ("pyxis", "singularity"):
        return []
    image = shlex.quote(plan.image)
    if _is_image_file(plan):
        # stdin, not a file argument: sha256sum escapes names with backslashes or newlines.
        return [f"printf 'BENCH_IMAGE_DIGEST=sha256:%s kind=file-sha256 image=%s\\n' "
                f"\"$(sha256sum < {image} | cut -d ' ' -f 1)\" {image}"]
    pinned = _PINNED.search(plan.image)
    if pinned:
        return [join(["echo", f"BENCH_IMAGE_DIGEST={pinned['digest']} kind=registry "
                              f"image={plan.image}"])]
    return [join(["echo", f"BENCH_IMAGE_DIGEST=unknown image={plan.image} why=a tag names no "
                          f"digest and {plan.platform.container_runtime} does not say which it "
                          "pulled; pin the image by digest (@sha256:...) to have it recorded"])]


def finish() -> list[str]:
    """Keep the launcher's exit status and print it last, so collectors need not trust sbatch."""
    return ["status=$?", f'echo "{END_MARKER}$status"', 'exit "$status"']


def ds_config_line(plan: LaunchPlan) -> list[str]:
    if plan.ds_config is None:
        return []
    return [f"# DeepSpeed config: {plan.run_dir}/ds_config.json (written by the kit beside this "
            "script)"]


def rankenv(plan: LaunchPlan) -> list[Token]:
    """Per-rank launchers (srun, mpiexec) start ``bench.train.rankenv``, which sets RANK etc."""
    return ["python", "-m", "bench.train.rankenv", *plan.train_argv]

