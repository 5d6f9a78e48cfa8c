"""Re-read the GPU train logs the kit already holds: 345m dp2 (delayed, bf16 on one H200 pair; in time
on the other) and the 20-iteration 1.3b / 2.7b same-machine A/B (delayed vs in time vs te vs bf16).
Prints 25-iteration window gaps, the delayed-minus-in-time difference per iteration window, grad-norm
phases, and the A/B losses. Reads the project's docs/reports and results/records."""
import json
import re
from pathlib import Path

R = Path(__file__).resolve().parents[2]
REC = R.parents[1] / "results" / "records"
LINE = re.compile(r"lm loss: ([0-9.E+-]+).*?grad norm: ([0-9.]+)")


def read(path):
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        if " iteration " in line and "lm loss:" in line:
            m = LINE.search(line)
            out.append((float(m.group(1)), float(m.group(2))))
    return out


def scaling(run_id):
    for f in REC.glob(f"*{run_id}*.json"):
        d = json.loads(f.read_text())
        return d.get("env", {}).get("MSAMP_FP8_SCALING", "-")
    return "?"


logs = R / "2026-11-26-h200x2-msamp-scaling/logs"
dl = read(next(logs.glob("345m*25464f*.train.log")))
bf = read(next(logs.glob("345m*9c9311*.train.log")))
it = read(next((R / "2026-11-26-h200x2-msamp/logs-machine1").glob("345m*93a308*.train.log")))
print("345m dp2, 500 it: 25-it window means (gaps x1000). del/bf16 on one machine, in-time on another")
print(f"{'its':<9}{'bf16':>7}{'del-bf':>8}{'it-bf':>8}{'del-it':>8}{'gn del':>8}{'gn it':>7}{'gn bf':>7}")
for w in range(0, 500, 25):
    def m(s, k=0, w=w):
        return sum(r[k] for r in s[w:w + 25]) / 25
    print(f"{w:>3}-{w + 24:<5}{m(bf):>7.3f}{(m(dl) - m(bf)) * 1e3:>+8.0f}{(m(it) - m(bf)) * 1e3:>+8.0f}"
          f"{(m(dl) - m(it)) * 1e3:>+8.0f}{m(dl, 1):>8.2f}{m(it, 1):>7.2f}{m(bf, 1):>7.2f}")
last50 = [sum(r[0] for r in s[-50:]) / 50 for s in (bf, dl, it)]
print(f"last 50: bf16 {last50[0]:.4f} delayed {last50[1]:.4f} in-time {last50[2]:.4f}")
print("iterations with grad norm > 20:", [(i + 1, round(dl[i][1], 1), round(it[i][1], 1), round(bf[i][1], 1))
                                         for i in range(500) if max(dl[i][1], it[i][1], bf[i][1]) > 20])

print("\n20-iteration same-machine A/B (lm loss at iterations 1, 4-10, 20; grad norm in brackets)")
for f in sorted(logs.glob("*b_tp1pp1dp2_*.train.log")):
    rid = f.name.split("Z-")[1].split(".")[0]
    text = f.read_text(errors="replace")
    msamp = re.search(r"kit_msamp \.+ (\S+)", text).group(1)
    mode = "bf16/te" if msamp == "off" else f"msamp-{msamp} {scaling(rid)}"
    fp8 = re.search(r"\n\s+fp8 \.+ (\S+)", text).group(1)
    s = read(f)
    pick = [0, 3, 4, 5, 6, 7, 8, 9, 19]
    print(f"{f.name[:4]} {rid} {mode:<20} fp8={fp8:<7}" + " ".join(f"{s[i][0]:.2f}({s[i][1]:.0f})" for i in pick))
