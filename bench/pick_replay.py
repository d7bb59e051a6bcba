#!/usr/bin/env python3
"""Replays the search's pick rule, at several margins, on the convolution searches of fresh processes.

    bench/pick_replay.py LOG [LOG ...] [--margins 0.02,0.03,0.05] [--show-flips] [--noise] [--families]

Each LOG is the stderr of one `dlbench bench ... --algorithm-cache none` run with DLBENCH_LOG_LEVEL=debug:
its lines `conv KEY DIRECTION CANDIDATE: T ms` are every candidate each search timed (the GEMM, cuDNN's
legacy algorithms in its heuristic's order, the graph engines in theirs). For each margin it prints
how many (shape, direction) decisions pick differently in two processes (every pair of logs) and what the
picks cost: the sum of the picked times over the sum of the fastest times, per process (1.0 = always the
fastest). A rule that makes no pair differ at a small cost is one the search can adopt; the processes'
step time is the test of it (bench/gpu_checks.sh, bench/ab.sh).

--noise prints, instead, how far each candidate's time relative to its search's fastest moved between the
processes (max - min of that ratio), by the candidate's time: the noise a rule's margin must absorb.

--families prints, instead, each family of candidates (a legacy algorithm and math type, a graph engine
whatever its knobs, the GEMM): the closest it came to its search's fastest, and what timing it cost a
process (two calls per timing: the warm-up and one round, as for a candidate given up).

The rule replayed is the search's (backend/cuda/conv/search.cc): the first legacy algorithm within the
margin of the fastest legacy one, then [that, engines...] the same way, then [that, GEMM]; for a
statistics search, the first engine within the margin among those faster than the forward and its own
pass. The replay takes each candidate's first timing: the search's second look at times near the
margin's edge is not replayed, so it overstates how often two processes differ.
"""
import argparse
import itertools
import re
import sys

LINE = re.compile(r"\[dlbench debug\] conv (cudnn-conv .*?) (forward|backward-data|backward-filter|statistics) (.+): ([0-9.]+) ms$")


def read_log(path):
    """{(key, direction): [(kind, name, ms), ...]} in the order timed."""
    decisions = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if not m:
                continue
            key, direction, name, ms = m.group(1), m.group(2), m.group(3), float(m.group(4))
            name = name.removeprefix("statistics ")  # the statistics entry's key ends in " statistics"
            kind = ("gemm" if name == "gemm" else "legacy" if name.startswith("legacy")
                    else "pass" if name.startswith("forward and") else "engine")
            decisions.setdefault((key, direction), []).append((kind, name, ms))
    return decisions


def first_within(cands, margin):
    if not cands:
        return None
    fastest = min(ms for _, _, ms in cands)
    for c in cands:
        if c[2] <= fastest * (1 + margin):
            return c
    return None


def rule_staged(cands, margin):
    if any(c[0] == "pass" for c in cands):  # the statistics search: engines faster than the pass, then the rule
        worth = next(c[2] for c in cands if c[0] == "pass")
        return first_within([c for c in cands if c[0] == "engine" and c[2] < worth], margin) or cands[0]
    legacy = [c for c in cands if c[0] == "legacy"]
    engines = [c for c in cands if c[0] == "engine"]
    gemm = [c for c in cands if c[0] == "gemm"]
    pick = first_within(legacy, margin)
    pick = first_within(([pick] if pick else []) + engines, margin)
    return first_within(([pick] if pick else []) + gemm, margin)


RULES = {"staged": rule_staged}


def print_noise(runs, keys):
    spreads = {}
    for k in keys:
        fastest = [min(ms for _, _, ms in r[k]) for r in runs]
        for j in range(min(len(r[k]) for r in runs)):
            ratios = [r[k][j][2] / f for r, f in zip(runs, fastest)]
            if max(ratios) >= 1.1:
                continue  # far from the pick: its noise decides nothing
            t = min(r[k][j][2] for r in runs)
            bucket = "< 0.05 ms" if t < 0.05 else "< 0.1 ms" if t < 0.1 else "< 0.3 ms" if t < 0.3 else ">= 0.3 ms"
            spreads.setdefault(bucket, []).append(max(ratios) - min(ratios))
    print(f"{'call time':<10} {'candidates':>10} {'median':>7} {'p90':>7} {'max':>7}   (within 10% of the fastest)")
    for bucket in ("< 0.05 ms", "< 0.1 ms", "< 0.3 ms", ">= 0.3 ms"):
        v = sorted(spreads.get(bucket, []))
        if v:
            print(f"{bucket:<10} {len(v):>10} {v[len(v) // 2]:>7.4f} {v[int(0.9 * len(v))]:>7.4f} {v[-1]:>7.4f}")


def print_families(runs, keys):
    best, spent = {}, {}
    for r in runs:
        for k in keys:
            fastest = min(ms for _, _, ms in r[k])
            for kind, name, ms in r[k]:
                family = name.split(" (")[0]
                best[family] = min(best.get(family, float("inf")), ms / fastest)
                spent[family] = spent.get(family, 0.0) + 2 * ms / len(runs)
    print(f"{'family':<32} {'closest':>8} {'ms a process':>13}")
    for family in sorted(spent, key=spent.get, reverse=True):
        print(f"{family:<32} {best[family]:>7.3f}x {spent[family]:>13.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--margins", default="0.02,0.03,0.04,0.05,0.06,0.08,0.10")
    ap.add_argument("--show-flips", action="store_true")
    ap.add_argument("--noise", action="store_true")
    ap.add_argument("--families", action="store_true")
    a = ap.parse_args()
    runs = [read_log(p) for p in a.logs]
    if any(not r for r in runs):
        sys.exit("pick_replay.py: a log has no `conv ... ms` lines (was DLBENCH_LOG_LEVEL=debug set?)")
    keys = sorted(set.intersection(*(set(r) for r in runs)))
    print(f"{len(runs)} processes, {len(keys)} decisions in all of them")
    if a.noise:
        print_noise(runs, keys)
        return
    if a.families:
        print_families(runs, keys)
        return
    print(f"{'rule':<14} {'margin':>6} {'pairs differing':>15} {'decisions differing':>19} {'cost (picked/fastest)':>24}")
    for name, rule in RULES.items():
        for margin in (float(m) for m in a.margins.split(",")):
            picks = [{k: rule(r[k], margin) for k in keys} for r in runs]
            differing_pairs = 0
            differing = set()
            for i, j in itertools.combinations(range(len(runs)), 2):
                d = [k for k in keys if picks[i][k][1] != picks[j][k][1]]
                differing_pairs += bool(d)
                differing.update(d)
            costs = []
            for r, p in zip(runs, picks):
                picked = sum(p[k][2] for k in keys)
                fastest = sum(min(ms for _, _, ms in r[k]) for k in keys)
                costs.append(picked / fastest)
            pairs = len(runs) * (len(runs) - 1) // 2
            print(f"{name:<14} {margin:>6.3f} {differing_pairs:>7}/{pairs:<7} {len(differing):>19} "
                  f"{min(costs):>11.4f}-{max(costs):.4f}")
            if a.show_flips:
                for k in sorted(differing):
                    names = sorted({p[k][1] for p in picks})
                    print(f"    {k[0]} {k[1]}: {' | '.join(names)}")


if __name__ == "__main__":
    main()
