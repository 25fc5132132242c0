#!/usr/bin/env python3
"""Summarise the JSON line printed by ompcluster-ftbench (read from stdin)."""
import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
parts = []
for f in d.get("failures", []):
    n = f["notified_ms"]
    lo = min(n.values()) if n else None
    parts.append("rank %s: first %s ms, all (consistent) %s ms" % (f["rank"], lo, f["consistent_ms"]))
fps = [(x["rank"], x["readmitted"], x["declared_dead_ms"], x["readmitted_ms"]) for x in d.get("false_positives", [])]
print("; ".join(parts), "| false positives (rank, readmitted, declared ms, readmitted ms):", fps,
      "| broadcast messages:", d.get("broadcast_messages"))
