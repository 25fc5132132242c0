#!/usr/bin/env python3
"""Make the simulator tables of docs/ft-detector.md.

Usage: python3 ft-detector/scripts/sim_tables.py [path/to/ompcluster-ftbench] > tables.md
Every number comes from `ompcluster-ftbench --simulate ...` runs (the commands are printed
beside each table). Times are ms from the failures (all at once) to the notice; the
simulated detector uses timestep 10 ms, period 100 ms, timeout 1000 ms, latency 5 us.
"""
import json, os, subprocess, sys, statistics

BENCH = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "release", "ompcluster-ftbench")

def sim(ranks, failures, pattern, bcast, shuffle, seed=1):
    cmd = [BENCH, "--simulate", "--ranks", str(ranks), "--failures", str(failures), "--pattern", pattern,
           "--bcast", bcast, "--shuffle", shuffle, "--seed", str(seed)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    d = json.loads(out)
    assert d["all_consistent"], cmd
    det = statistics.mean(f["detected_ms"] for f in d["failures"])
    return d, det

def mean_runs(ranks, failures, pattern, bcast, shuffle, seeds):
    rs = [sim(ranks, failures, pattern, bcast, shuffle, s) for s in seeds]
    return (statistics.mean(r[0]["consistent_ms"] for r in rs), statistics.mean(r[1] for r in rs),
            statistics.mean(r[0]["broadcast_messages"] for r in rs), statistics.mean(r[0]["wall_s"] for r in rs))

SEEDS = [1, 2, 3, 4, 5]
print("### Table 1: broadcast algorithms, 480 ranks, 16 simultaneous failures, shuffle on (mean of seeds 1-5)\n")
print("`ompcluster-ftbench --simulate --ranks 480 --failures 16 --pattern P --bcast B --shuffle on --seed S`\n")
print("| bcast | pattern | consistent ms | mean detection ms | broadcast messages | messages per failure |")
print("|---|---|---|---|---|---|")
for b in ["chord", "bmg", "hba"]:
    for p in ["sequential", "random"]:
        c, det, m, _ = mean_runs(480, 16, p, b, "on", SEEDS)
        print(f"| {b} | {p} | {c:.0f} | {det:.0f} | {m:.0f} | {m/16:.0f} |")
sys.stdout.flush()

print("\n### Table 2: ring shuffle, chord, 480 ranks, 16 simultaneous failures (mean of seeds 1-5)\n")
print("`ompcluster-ftbench --simulate --ranks 480 --failures 16 --pattern P --bcast chord --shuffle on|off --seed S`\n")
print("| pattern | shuffle | consistent ms | mean detection ms |")
print("|---|---|---|---|")
for p in ["sequential", "random"]:
    for s in ["on", "off"]:
        c, det, _, _ = mean_runs(480, 16, p, "chord", s, SEEDS)
        print(f"| {p} | {s} | {c:.0f} | {det:.0f} |")
sys.stdout.flush()

print("\n### Table 3: scaling of chord, 16 simultaneous failures (seed 1)\n")
print("`ompcluster-ftbench --simulate --ranks N --failures 16 --pattern P --bcast chord --shuffle S`\n")
print("| ranks | seq, shuffle on: consistent ms | seq, shuffle off: consistent ms | random, shuffle on: consistent ms | messages (random) | sim wall s (random) |")
print("|---|---|---|---|---|---|")
for n in [480, 1000, 4000, 10000, 30000, 100000]:
    a, _ = sim(n, 16, "sequential", "chord", "on")
    b, _ = sim(n, 16, "sequential", "chord", "off")
    c, _ = sim(n, 16, "random", "chord", "on")
    print(f"| {n} | {a['consistent_ms']:.0f} | {b['consistent_ms']:.0f} | {c['consistent_ms']:.0f} | {c['broadcast_messages']} | {c['wall_s']:.1f} |")
    sys.stdout.flush()

print("\n### Table 4: scaling of the three broadcasts, random failures, shuffle on (seed 1)\n")
print("`ompcluster-ftbench --simulate --ranks N --failures F --pattern random --bcast B --shuffle on`\n")
print("| ranks | failures | chord ms / messages | bmg ms / messages | hba ms / messages |")
print("|---|---|---|---|---|")
for n, f in [(480, 16), (1000, 16), (10000, 16), (100000, 2)]:
    cells = []
    for b in ["chord", "bmg", "hba"]:
        d, _ = sim(n, f, "random", b, "on")
        cells.append(f"{d['consistent_ms']:.0f} / {d['broadcast_messages']}")
    print(f"| {n} | {f} | " + " | ".join(cells) + " |")
    sys.stdout.flush()
