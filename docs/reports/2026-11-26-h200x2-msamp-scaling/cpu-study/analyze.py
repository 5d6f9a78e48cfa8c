"""Summarise results/*.jsonl: 25-step window means (and gap to ref), final mean of last 50, val loss,
and cast saturation / underflow figures. Usage: analyze.py [results_dir] [ref_tag]"""

import json
import sys
from pathlib import Path

d = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results")
ref_tag = sys.argv[2] if len(sys.argv) > 2 else "ref"
runs = {}
for f in sorted(d.glob("*.jsonl")):
    rows = [json.loads(line) for line in f.read_text().splitlines()]
    runs[f.stem] = (rows[0], rows[1:])


def wmeans(rows, w=25):
    losses = [r["loss"] for r in rows]
    return [sum(losses[i:i + w]) / len(losses[i:i + w]) for i in range(0, len(losses) - w + 1, w)]


ref = runs.get(ref_tag)
ref_w = wmeans(ref[1]) if ref else None
print(f"{'run':<16}{'steps':>6}{'last50':>9}{'gap':>8}{'val':>8}{'valgap':>8}"
      f"  25-step window gaps to {ref_tag} (x1000)")
for tag, (_head, rows) in runs.items():
    n = len(rows)
    last50 = sum(r["loss"] for r in rows[-50:]) / min(50, n)
    val = [r["val"] for r in rows if "val" in r]
    gap = vgap = ""
    wg = ""
    if ref and tag != ref_tag:
        m = min(n, len(ref[1]))
        gap = f"{last50 - sum(r['loss'] for r in ref[1][m - 50:m]) / 50:+.4f}" if m == n else ""
        rv = [r["val"] for r in ref[1][:n] if "val" in r]
        if val and rv:
            vgap = f"{val[-1] - rv[-1]:+.4f}"
        wg = " ".join(f"{(a - b) * 1000:+.0f}" for a, b in zip(wmeans(rows), ref_w, strict=False))
    print(f"{tag:<16}{n:>6}{last50:>9.4f}{gap:>8}{(val[-1] if val else float('nan')):>8.4f}{vgap:>8}  {wg}")

print("\ncast figures (mean over steps of the per-step mean over casts; windows of steps)")
keys = ["input.sat", "input.under", "input.flush", "input.err", "ograd.sat", "ograd.under", "ograd.flush", "ograd.err"]
for tag, (_head, rows) in runs.items():
    rows = [r for r in rows if "cast" in r]
    if not rows:
        continue
    print(f"\n{tag}")
    print(f"{'steps':<10}" + "".join(f"{k:>13}" for k in keys) + f"{'in.minhd':>9}{'og.minhd':>9}{'sat steps':>10}")
    for lo, hi in ((0, 25), (25, 75), (75, 200), (200, 400), (0, 10_000)):
        sel = [r for r in rows if lo <= r["step"] < hi]
        if not sel:
            continue
        vals = [sum(r["cast"].get(k, 0) for r in sel) / len(sel) for k in keys]
        mh_in = min(r["cast"]["input.minhead"] for r in sel)
        mh_og = min(r["cast"]["ograd.minhead"] for r in sel)
        nsat = sum(1 for r in sel if r["cast"].get("input.sat", 0) > 0 or r["cast"].get("ograd.sat", 0) > 0)
        span = f"{lo}-{min(hi, rows[-1]['step'] + 1)}"
        print(f"{span:<10}" + "".join(f"{v:>13.3e}" for v in vals)
              + f"{mh_in:>9.2f}{mh_og:>9.2f}{nsat:>10}")
    per = {}
    for r in rows:
        for k, v in r.get("sat_by_linear", {}).items():
            per[k] = per.get(k, 0) + v
    if per:
        top = sorted(per.items(), key=lambda kv: -kv[1])[:6]
        print("  saturation by linear (sum over steps of per-step fraction):",
              ", ".join(f"{k} {v:.2e}" for k, v in top))
