"""The entry's AdamW choice on megatron-core's torch fallback (this machine has neither TE nor apex)."""

from __future__ import annotations

from tests.train.test_entry import ENTRY, GOOD_ARGV

# Builds AdamW exactly as megatron.core.optimizer does on the torch fallback (same keyword set),
# once per choice, steps each on the same parameters and gradients, and prints what was built.
SCRIPT = """
import torch
from megatron.core import optimizer as megatron_optimizer
from bench.train.optimizer import select_torch_adam

assert megatron_optimizer.USING_PYTORCH_OPTIMIZER
results = {}
for choice in ("foreach", "fused"):
    print(choice, select_torch_adam(choice))
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, 32)), torch.nn.Parameter(torch.randn(32))]
    opt = torch.optim.AdamW(params=[{"params": params}], lr=1e-3, weight_decay=0.1,
                            betas=(0.9, 0.95), eps=1e-8, capturable=False)
    for step in range(3):
        for p in params:
            p.grad = torch.full_like(p, 0.01 * (step + 1)) + 0.001 * p.detach()
        opt.step()
    print(choice, "fused" if opt.defaults["fused"] else "foreach")
    results[choice] = [p.detach().clone() for p in params]
same = all(torch.allclose(a, b, rtol=1e-6, atol=1e-7)
           for a, b in zip(results["foreach"], results["fused"]))
print("same update", same)
"""


def test_fused_choice_builds_torchs_fused_adamw_with_the_same_update(run_megatron) -> None:
    result = run_megatron(["-c", SCRIPT])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:-1] == [
        "foreach torch-foreach", "foreach foreach",
        "fused torch-fused", "fused fused", "same update True"], result.stdout


def test_entry_reports_the_adam_it_uses(run_megatron) -> None:
    default = run_megatron([*ENTRY, *GOOD_ARGV])
    assert ", adam torch-fused," in default.stdout, default.stderr[-3000:]
    foreach = run_megatron([*ENTRY, *GOOD_ARGV, "--kit-torch-adam", "foreach"])
    assert ", adam torch-foreach," in foreach.stdout, foreach.stderr[-3000:]
