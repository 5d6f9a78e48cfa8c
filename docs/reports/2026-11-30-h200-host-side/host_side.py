"""The host's side of a profiled run's trace: what the CPU threads did in the profiled steps.

python host_side.py TRACE: the torch profiler's Chrome trace (``profile/torch_profile/rank-0.json.gz``
of a ``bench run --profile`` run folder; Megatron's profiler records CPU ops as well as kernels).
Per step: the kernels and their GPU time, the CUDA launch calls and their host cost, and for each
CPU thread (the training loop's, and autograd's, which runs the backward pass) the time its
outermost ops cover and the outermost ops that took the most, inclusive of what they call.
"""
import collections
import gzip
import json
import re
import sys

events = [e for e in json.load(gzip.open(sys.argv[1], "rt"))["traceEvents"] if e.get("ph") == "X"]
steps = [e for e in events if e.get("cat") == "user_annotation" and re.match(r"^ProfilerStep#\d+$", e["name"])]
t0, t1, n = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps), len(steps)
window = [e for e in events if t0 <= e["ts"] < t1]
kernels = [e for e in window if e.get("cat") == "kernel"]
print(f"{n} profiled steps, {(t1 - t0) / 1e3 / n:.1f} ms a step (profiler on)")
print(f"kernels: {len(kernels) / n:.0f} a step, {sum(e['dur'] for e in kernels) / 1e3 / n:.1f} ms of GPU time a step")
calls = collections.defaultdict(lambda: [0, 0.0])
for e in window:
    if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e["name"]:
        calls[e["name"]][0] += 1
        calls[e["name"]][1] += e["dur"]
launches = sum(c for c, _ in calls.values())
print(f"launch calls: {launches / n:.0f} a step, {sum(d for _, d in calls.values()) / 1e3 / n:.1f} ms a step, "
      f"{sum(d for _, d in calls.values()) / launches:.1f} us each")
for thread in sorted({(e["pid"], e["tid"]) for e in window if e.get("cat") == "cpu_op"}):
    ops = sorted((e for e in window if e.get("cat") == "cpu_op" and (e["pid"], e["tid"]) == thread),
                 key=lambda e: (e["ts"], -e["dur"]))
    outer, end = [], -1.0
    for e in ops:
        if e["ts"] >= end:
            outer.append(e)
            end = e["ts"] + e["dur"]
    print(f"thread {thread[1]}: {len(outer) / n:.0f} outermost ops a step covering "
          f"{sum(e['dur'] for e in outer) / 1e3 / n:.1f} ms a step")
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for e in outer:
        by_name[e["name"]][0] += 1
        by_name[e["name"]][1] += e["dur"]
    for name, (count, dur) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"   {name[:72]:72s} {count / n:5.0f} a step {dur / 1e3 / n:7.1f} ms {dur / count:7.1f} us each")
