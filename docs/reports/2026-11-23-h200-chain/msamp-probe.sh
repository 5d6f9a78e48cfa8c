#!/usr/bin/env bash
# What MS-AMP at the kit's pin does on today's stack (one lent H200: torch 2.11 / CUDA 13, TE 2.20.2
# in /tmp/te-site, DeepSpeed 0.18.2 in /tmp/mds-site from h200-megatron-deepspeed.sh), so that a
# failure can be named exactly (symbol, file, version).
# Usage (repo root): msamp-probe.sh build   (in the background: CUDA extensions for sm_90)
#                    msamp-probe.sh probe   (imports, O1/O2 on a small model, TE and Megatron hooks)
set -uo pipefail
SRC=/tmp/msamp-src SITE=/tmp/msamp-site
case ${1:?build or probe} in
  build)
    rm -rf "$SRC" && mkdir -p "$SRC" "$SITE" && tar -xzf .carry/ms-amp-*.tar.gz -C "$SRC" --strip-components 1
    python3 bench/images/series.py apply patches/ms-amp/series "$SRC" || exit 1
    # msamp's logging imports colorlog, which the machine lacks (carried as a wheel).
    python3 -m pip install -q --no-index --no-deps --target "$SITE" .carry/colorlog-*.whl || exit 1
    # The dist_op extension needs the msccl submodule, which the snapshot lacks: not built.
    export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${MAX_JOBS:-8}
    for part in . msamp/operators/arithmetic msamp/operators/fp4_quantize msamp/optim; do
      echo "== $part"
      (cd "$SRC/$part" && python3 -m pip install -q --no-index --no-deps --no-build-isolation \
        --target "$SITE" .) || echo "BUILD FAILED: $part"
    done
    touch "$SITE/.done"
    ;;
  probe)
    [ -f "$SITE/.done" ] || { echo "MS-AMP build not finished"; tail -n 20 /tmp/msamp-build.log; exit 1; }
    grep -E '^==|FAILED|error' /tmp/msamp-build.log | head -n 20
    PYTHONPATH=$SITE:/tmp/te-site:/tmp/mds-site:/tmp/mc-site python3 - <<'PY'
import traceback
import torch

def attempt(what, fn):
    try:
        print(what, "->", fn())
    except BaseException as exc:  # the exact failure is the finding
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        print(what, "FAILED:", type(exc).__name__, str(exc).splitlines()[0][:300],
              f"({frame.filename}:{frame.lineno})")

def o_level(level):
    import msamp
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = msamp.initialize(model, opt, opt_level=level)
    x = torch.randn(256, 1024, device="cuda")
    losses = []
    for _ in range(5):
        loss = model(x).float().pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad(); losses.append(round(loss.item(), 5))
    return losses

def te_replace():
    import transformer_engine.pytorch as te
    from msamp.te import TeReplacer
    model = torch.nn.Sequential(te.Linear(1024, 1024), te.LayerNormMLP(1024, 4096)).cuda()
    model = TeReplacer.replace(model)
    with te.fp8_autocast(enabled=True):
        out = model(torch.randn(256, 1024, device="cuda"))
    out.float().mean().backward()
    return type(model[0]).__name__

attempt("import msamp", lambda: __import__("msamp").__file__)
attempt("msamp O1 (5 steps, loss)", lambda: o_level("O1"))
attempt("msamp O2 (5 steps, loss)", lambda: o_level("O2"))
attempt("msamp.te TeReplacer on TE 2.20 Linear/LayerNormMLP", te_replace)
attempt("import msamp.megatron", lambda: __import__("msamp.megatron").__name__)
attempt("import msamp.megatron.optimizer", lambda: __import__("msamp.megatron.optimizer").__name__)
PY
    ;;
esac
