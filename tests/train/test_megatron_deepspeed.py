"""Megatron-DeepSpeed at the pinned commit with the kit's series, on CPU with DeepSpeed 0.18.2 (as
the images pin it): its own argument parser and validator on the kit's argv and on the campaign
files' Megatron-DeepSpeed runs, the apex fallbacks, the fused-kernel architectures, its own
tools/preprocess_data.py against ``bench data``, the torch SDPA attention against the unfused one,
and the compiled element-wise fusions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.config.campaign import load_campaign
from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import load_presets
from bench.dataset.npm import fetch_gpt2_files
from bench.dataset.prepare import prepare
from bench.images.pins import REPO_ROOT
from bench.planning.plan import plan
from bench.running import gpus as hardware
from bench.running.trainenv import Facts
from tests.conftest import options
from tests.inprocess import run_cli

CACHE = Path.home() / ".cache" / "megatron-bench"
# DeepSpeed and the light dependencies of DeepSpeed and Megatron-DeepSpeed, as images/pins.toml pins
# them (the same list docs/reports/2026-11-23-h200-mds-fusions/gather-mds-carry.sh carries to the GPUs).
DEEPSPEED_SITE = ["deepspeed==0.18.2", "hjson==3.1.0", "pydantic==2.11.7", "pydantic-core==2.33.2",
                  "annotated-types==0.7.0", "typing-inspection==0.4.1", "msgpack==1.1.0",
                  "py-cpuinfo==9.0.0", "psutil==7.0.0", "ninja==1.11.1.4", "einops==0.8.1",
                  "tqdm==4.67.1", "regex==2024.11.6", "pybind11==2.13.6", "six==1.17.0"]


@pytest.fixture(scope="session")
def deepspeed_site(megatron_python) -> Path:
    """DeepSpeed 0.18.2 from its sdist (no ops built, as on the GPUs) in a cached --target folder."""
    site = CACHE / "deepspeed-0.18.2-py312-site"
    if not site.is_dir():
        partial = site.with_name(site.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run([megatron_python, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", str(partial), *DEEPSPEED_SITE],
                       check=True, env={**os.environ, "DS_BUILD_OPS": "0"}, timeout=900)
        partial.rename(site)
    return site


def _run(python: str, site: Path, tree: Path, args: list[str], stdin: str = "",
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": f"{site}:{tree}", "CUDA_VISIBLE_DEVICES": "",
                **(env or {})}
    return subprocess.run([python, *args], cwd=tree, env=full_env, input=stdin,
                          capture_output=True, text=True, timeout=600, check=False)


def _mds_plan(preset: str, layout: str, gpus: int, **extra):
    return plan(load_presets()[preset], layout, load_platform("local"),
                options(gpus=gpus, gpus_present=gpus, engine="megatron-deepspeed",
                        data_path="/data/gpt2_text_document", vocab_file="vocab.json",
                        merge_file="merges.txt", **extra))


def test_kit_argv_is_accepted_by_megatron_deepspeeds_parser(megatron_python, deepspeed_site,
                                                             patched_tree):
    plans = [_mds_plan("1.3b", "tp1pp1", 1), _mds_plan("1.3b", "tp1pp1", 1, precision="fp16"),
             _mds_plan("1.3b", "tp1pp1", 1, recompute="full"),
             _mds_plan("1.3b", "tp1pp1", 1, recompute="selective"),
             _mds_plan("6.7b", "dp2zero2", 2), _mds_plan("13b", "tp2pp4", 8, recompute="full")]
    payload = json.dumps([{"argv": list(p.train_args), "world_size": p.world_size} for p in plans])
    done = _run(megatron_python, deepspeed_site, patched_tree,
                [str(REPO_ROOT / "tests/mds_argcheck.py")], stdin=payload)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    failures = [f"{p.run_id}: {r['error']}" for p, r in zip(plans, results, strict=True)
                if not r["ok"]]
    assert not failures, "\n".join(failures)
    bf16, fp16, full, selective, zero2, big = results
    assert (bf16["bf16"], bf16["fp16"], bf16["zero_stage"], bf16["deepspeed"]) == (True, False, 1, True)
    assert (fp16["fp16"], fp16["bf16"]) == (True, False)
    assert bf16["gradient_accumulation_fusion"] is False
    assert full["checkpoint_activations"] and full["recompute_granularity"] is None
    assert _recomputes_without_a_pipeline(full)
    assert selective["recompute_granularity"] == "selective"
    assert (zero2["zero_stage"], zero2["data_parallel_size"]) == (2, 2)
    assert big["data_parallel_size"] == 1 and big["checkpoint_activations"]


def _recomputes_without_a_pipeline(args: dict) -> bool:
    """Megatron-DeepSpeed's ParallelTransformer._checkpointed_forward (megatron/model/transformer.py)
    recomputes through DeepSpeed's checkpointing or by a --recompute-method, and raises "Invalid
    activation recompute method" otherwise: without a pipeline, --checkpoint-activations alone
    crashes at the first step (13b tp4 and dp4 ZeRO-2 did on four GPUs)."""
    return bool(args["deepspeed_activation_checkpointing"] or args["recompute_method"])


# The campaign files with Megatron-DeepSpeed runs and the 80 GB GPUs the GPU machine plans them
# for (x4-engines.toml caps them at 80 GB as well, through the kit's wrapper).
MDS_CAMPAIGNS = {"h100x2": 2, "x4-engines": 4}


def test_the_campaigns_megatron_deepspeed_runs_are_accepted_by_its_parser(
        megatron_python, deepspeed_site, patched_tree, monkeypatch, tmp_path):
    """Every Megatron-DeepSpeed run of the campaign files, planned as the GPU machine plans it
    (80 GB H100s, real data, apex), through its own parser and validator: a flag or a layout it
    refuses fails here, not after a machine's setup; the seeds' rows keep what the seeds set."""
    monkeypatch.setattr("bench.running.machine.facts", lambda **kw: Facts(
        python="python", capabilities=Capabilities(apex_layer_norm=True, fused_wgrad=True)))
    names, plans = [], []
    for campaign, gpus in MDS_CAMPAIGNS.items():
        monkeypatch.setattr(hardware, "detect_gpus", lambda gpus=gpus: hardware.LocalGPUs(
            gpus, "NVIDIA H100 80GB HBM3", "570.00", 85.0))
        path = REPO_ROOT / "results" / "campaigns" / f"{campaign}.toml"
        runs = [run.name for run in load_campaign(path).runs
                if "--engine" in run.argv and run.argv[run.argv.index("--engine") + 1] == "megatron-deepspeed"]
        result = run_cli("run", "--campaign", str(path), *(a for n in runs for a in ("--only", n)),
                         "--data-path", "/data/gpt2_text_document", "--vocab-file", "vocab.json",
                         "--merge-file", "merges.txt", "--dry-run", "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stderr.count(" GB per GPU of 80 GB") == len(runs), result.stderr
        names += runs
        plans += [entry["plan"] for entry in json.loads(result.stdout)["runs"]]
    # The plan's argv starts with the interpreter, the kit's entry that probes the host (and under a
    # memory cap, x4-engines.toml's, caps the GPU) and then Megatron-DeepSpeed's pretrain_gpt.py.
    scripts = [next(i for i, a in enumerate(p["train_argv"]) if a.endswith("/pretrain_gpt.py"))
               for p in plans]
    payload = json.dumps([{"argv": p["train_argv"][i + 1:], "world_size": p["world_size"]}
                          for p, i in zip(plans, scripts, strict=True)])
    entry = ["python", "-m", "bench.train.script_entry"]
    capped = [*entry, "--kit-gpu-memory-cap", "80"]
    assert all(p["train_argv"][:i] in (entry, capped) for p, i in zip(plans, scripts, strict=True))
    assert sum(p["train_argv"][:i] == capped for p, i in zip(plans, scripts, strict=True)) >= 7
    done = _run(megatron_python, deepspeed_site, patched_tree,
                [str(REPO_ROOT / "tests/mds_argcheck.py")], stdin=payload)
    assert done.returncode == 0, done.stderr[-3000:]
    results = dict(zip(names, json.loads(done.stdout.strip().splitlines()[-1]), strict=True))
    failures = [f"{name}: {r['error']}" for name, r in results.items() if not r["ok"]]
    assert len(results) >= 16 and not failures, "\n".join(failures)
    lumi = [results[n] for n in ("13b-tp2pp2-mds-fp16", "13b-tp4-mds-fp16", "13b-dp4-zero2-mds-fp16")]
    assert all(r["fp16"] and r["checkpoint_activations"] for r in lumi)
    assert all(_recomputes_without_a_pipeline(r) for r in results.values() if r["checkpoint_activations"])
    assert [(r["zero_stage"], r["data_parallel_size"]) for r in lumi] == [(1, 1), (1, 1), (2, 4)]
    seed003 = results["345m-tp4-zero3-offload-mds-fp16"]
    assert (seed003["zero_stage"], seed003["cpu_optimizer"], seed003["fp16"]) == (3, True, True)
    assert (seed003["micro_batch_size"], seed003["global_batch_size"]) == (1, 4)
    polaris = results["6.7b-tp4-zero1-seq4096-mds"]
    assert (polaris["seq_length"], polaris["sequence_parallel"], polaris["zero_stage"]) == (4096, False, 1)


IMPORT_ON_CUDA = """
from deepspeed.accelerator import get_accelerator
assert get_accelerator().device_name() == "cuda"
import megatron.utils, megatron.model, megatron.optimizer, megatron.optimizer.clip_grads
from megatron.model.fused_layer_norm import HAVE_FUSED_LAYER_NORM
print(megatron.optimizer.Adam.__module__, megatron.optimizer.Adam.__name__, HAVE_FUSED_LAYER_NORM)
"""


def test_apex_is_optional_on_cuda(megatron_python, deepspeed_site, patched_tree, tmp_path):
    # DeepSpeed's CUDA accelerator, chosen by name on this GPU-less machine: the modules take
    # their CUDA import paths, where apex was imported unconditionally.
    cuda = {"DS_ACCELERATOR": "cuda"}
    done = _run(megatron_python, deepspeed_site, patched_tree, ["-c", IMPORT_ON_CUDA], env=cuda)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["torch.optim.adamw", "AdamW", "False"]
    unpatched = tmp_path / "unpatched"
    shutil.copytree(patched_tree, unpatched)
    patch = REPO_ROOT / "patches/megatron-deepspeed/0002-apex-optional-on-cuda.patch"
    subprocess.run(["patch", "-d", str(unpatched), "-p1", "-R", "--batch", "-i", str(patch)],
                   check=True, capture_output=True)
    failed = _run(megatron_python, deepspeed_site, unpatched, ["-c", IMPORT_ON_CUDA], env=cuda)
    assert failed.returncode != 0 and "No module named 'apex'" in failed.stderr


ARCH_FLAGS = """
import os, sys
os.environ["TORCH_CUDA_ARCH_LIST"] = sys.argv[1]
from megatron import fused_kernels
print(" ".join(fused_kernels._cuda_arch_flags()))
"""


def test_fused_kernels_build_for_the_asked_architectures(megatron_python, deepspeed_site,
                                                        patched_tree):
    done = _run(megatron_python, deepspeed_site, patched_tree, ["-c", ARCH_FLAGS, "9.0;8.0 9.0a+PTX"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].split() == ["-gencode", "arch=compute_80,code=sm_80",
                                   "-gencode", "arch=compute_90,code=sm_90",
                                   "-gencode", "arch=compute_90a,code=sm_90a"]
    nothing = _run(megatron_python, deepspeed_site, patched_tree, ["-c", ARCH_FLAGS, ""])
    assert nothing.returncode != 0 and "set TORCH_CUDA_ARCH_LIST" in nothing.stderr
    source = (patched_tree / "megatron/fused_kernels/__init__.py").read_text()
    assert "arch=compute_70" not in source


def test_its_own_preprocess_tool_runs_without_nltk_and_matches_bench_data(
        megatron_python, deepspeed_site, patched_tree, tmp_path):
    vocab, merges = fetch_gpt2_files()
    source = tmp_path / "docs.jsonl"
    texts = ["The quick brown fox.", "It's GPT-2's BPE, with <|endoftext|> as text.",
             "Ünïcödé — 中文 😀\n\nnext paragraph\tand a tab's contraction"]
    source.write_text("".join(json.dumps({"text": t * 20}) + "\n" for t in texts))
    done = _run(megatron_python, deepspeed_site, patched_tree, [
        "tools/preprocess_data.py", "--input", str(source), "--output-prefix",
        str(tmp_path / "mds"), "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(vocab),
        "--merge-file", str(merges), "--append-eod", "--workers", "1"])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "nltk" not in done.stderr
    kit = prepare([source], vocab, merges, tmp_path / "kit")
    for suffix in (".bin", ".idx"):
        mds = (tmp_path / f"mds_text_document{suffix}").read_bytes()
        assert mds == kit.prefix.with_name(kit.prefix.name + suffix).read_bytes(), suffix


SDPA_AGAINST_UNFUSED = """
import types
import torch
from megatron import global_vars
from megatron.core import parallel_state
from megatron.model.enums import AttnMaskType
from megatron.model.transformer import CoreAttention

parallel_state.set_tensor_model_parallel_world_size(1)
parallel_state.get_global_memory_buffer = lambda: types.SimpleNamespace(  # CPU: no CUDA buffer
    get_tensor=lambda shape, dtype, name: torch.empty(shape, dtype=dtype))
# sequence_parallel: both paths then skip the CUDA RNG tracker, which a CPU has not.
config = types.SimpleNamespace(fp16=False, bf16=False, apply_query_key_layer_scaling=True,
                               attention_softmax_in_fp32=True, sequence_parallel=True, kv_channels=16,
                               num_attention_heads=4, masked_softmax_fusion=False,
                               attention_dropout=0.0)
def attention(use_torch_sdpa, mask_type=AttnMaskType.causal, reset_attention_mask=False):
    global_vars._GLOBAL_ARGS = types.SimpleNamespace(
        use_torch_sdpa=use_torch_sdpa, reset_attention_mask=reset_attention_mask,
        curriculum_learning_legacy=False, data_efficiency_curriculum_learning=False)
    return CoreAttention(3, config, mask_type)  # layer 3: query-key layer scaling by 3
torch.manual_seed(0)
s, b, heads, dim = 32, 2, 4, 16
q, k, v = (torch.randn(s, b, heads, dim) for _ in range(3))
causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None]
sdpa, unfused = attention(True), attention(False)
assert sdpa.use_torch_sdpa and not unfused.use_torch_sdpa
out, ref = sdpa(q, k, v, causal), unfused(q, k, v, causal)
assert out.shape == ref.shape == (s, b, heads * dim), out.shape
torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
# Only the plain causal mask: a padding mask or per-document masks keep the unfused path.
assert not attention(True, AttnMaskType.padding).use_torch_sdpa
assert not attention(True, reset_attention_mask=True).use_torch_sdpa
print("max difference", (out - ref).abs().max().item())
"""


def test_torch_sdpa_attention_equals_the_unfused_path(megatron_python, deepspeed_site, patched_tree):
    """Patch 11 on CPU: --use-torch-sdpa gives the unfused core attention's output (same layout,
    same net scale with query-key layer scaling), and only for the plain causal mask."""
    done = _run(megatron_python, deepspeed_site, patched_tree, ["-c", SDPA_AGAINST_UNFUSED])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "max difference" in done.stdout


COMPILED_FUSIONS = """
import torch
from megatron.model import fused_bias_gelu, transformer
from megatron.model.jit_fuser import jit_fuser
assert jit_fuser is torch.compile, jit_fuser
torch.manual_seed(0)
bias, y, g = torch.randn(64), torch.randn(8, 64), torch.randn(8, 64)
x = bias + y
tanh = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
torch.testing.assert_close(fused_bias_gelu.bias_gelu(bias, y), x * 0.5 * (1.0 + tanh))
grad = 0.5 * x * ((1 - tanh * tanh) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + tanh)
torch.testing.assert_close(fused_bias_gelu.bias_gelu_back(g, bias, y), grad * g)
residual = torch.randn(8, 64)
torch.testing.assert_close(transformer.bias_dropout_add_fused_train(y, bias, residual, 0.0),
                           residual + x)
print("compiled fusions ok")
"""


def test_fusions_compile_and_keep_their_arithmetic(megatron_python, deepspeed_site, patched_tree):
    """Patch 12 on CPU: the bias-GeLU (forward and gradient) and bias-dropout-add functions are
    torch.compile'd (TorchScript fuses nothing on today's torch) and compute what they did."""
    done = _run(megatron_python, deepspeed_site, patched_tree, ["-c", COMPILED_FUSIONS])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compiled fusions ok" in done.stdout


SEQUENCE_PARALLEL_BATCHES = """
import types
import torch
import torch.distributed as dist
import contextlib
from megatron import global_vars
from megatron.core import parallel_state, tensor_parallel
from megatron.core.tensor_parallel.layers import SequenceParallelPositionEmbedding
from megatron.model.language_model import Embedding

# Rank `rank` of two tensor-parallel ranks, in one CPU process: a group of one stands in for the
# tensor-parallel group, so its all-reduce leaves the rank's partial sum as it is.
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
parallel_state._TENSOR_MODEL_PARALLEL_GROUP = dist.group.WORLD
parallel_state.set_tensor_model_parallel_world_size(2)
s, b, h, vocab = 16, 2, 8, 64
positions = torch.arange(s).unsqueeze(0).expand(b, s)  # get_ltor_masks_and_position_ids'

# DeepSpeed's pipeline path (pp > 1): get_batch_pipe hands each rank the whole sequence, and the
# position embedding of rank 1 holds positions 8..15 only.
parallel_state.set_tensor_model_parallel_rank(1)
try:
    SequenceParallelPositionEmbedding(s, h)(positions)
    print("pipe: whole-sequence positions embedded")
except IndexError as error:
    print("pipe: IndexError", error)

# Without a pipeline: get_batch gives rank 0 its half of the sequence (tokens and positions), and
# the embedding then scatters that half over the two ranks again.
parallel_state.set_tensor_model_parallel_rank(0)
global_vars._GLOBAL_ARGS = types.SimpleNamespace(
    sequence_parallel=True, add_position_embedding=True, params_dtype=torch.float32,
    perform_initialization=True, zero_stage=1, fp32_residual_connection=False)
config = types.SimpleNamespace(init_method=torch.nn.init.zeros_, use_cpu_initialization=True,
                               perform_initialization=True, params_dtype=torch.float32)
embedding = Embedding(h, vocab, s, 0.0, config)
# CPU: no CUDA RNG tracker for the embedding's dropout (0.0 here).
tensor_parallel.get_cuda_rng_tracker = lambda: types.SimpleNamespace(fork=contextlib.nullcontext)
tokens = torch.randint(0, vocab // 2, (b, s // 2))  # rank 0's half of the vocabulary
out = embedding(tokens, positions[:, : s // 2])
print("no pipe: rank's sequence", s // 2, "embedding output", tuple(out.shape))
"""


def test_megatron_deepspeeds_sequence_parallelism_splits_batches_wrongly(
        megatron_python, deepspeed_site, patched_tree):
    """Why the planner refuses sp on Megatron-DeepSpeed: its own code on CPU. With a pipeline the
    position embedding of rank 1 cannot take the whole sequence that get_batch_pipe hands it (the
    IndexError behind 13b tp2pp2 + sp's three crashes on four H200s); without one, the half that
    get_batch gives a rank is halved again by the embedding's scatter."""
    done = _run(megatron_python, deepspeed_site, patched_tree, ["-c", SEQUENCE_PARALLEL_BATCHES])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pipe: IndexError" in done.stdout, done.stdout
    assert "no pipe: rank's sequence 8 embedding output (4, 2, 8)" in done.stdout, done.stdout
