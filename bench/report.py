"""Print, per benchmark group, every implementation's median time and its ratio to mixedcore.

    python bench/report.py RESULTS.json

A ratio above 1 means mixedcore is faster than that baseline (baseline time / mixedcore time).
"""
import json
import sys
from collections import defaultdict


def main(path):
    with open(path) as f:
        data = json.load(f)
    groups = defaultdict(dict)
    for b in data["benchmarks"]:
        impl = b.get("extra_info", {}).get("impl") or b["name"]
        groups[b["group"]][impl] = b
    for group in sorted(groups):
        impls = groups[group]
        mine = impls.get("mixedcore")
        parts = []
        for impl, b in sorted(impls.items(), key=lambda kv: kv[0] != "mixedcore"):
            med = b["stats"]["median"]
            extra = {k: v for k, v in b.get("extra_info", {}).items() if k in ("GB/s", "GFLOP/s")}
            rate = " ".join(f"{v} {k}" for k, v in extra.items())
            ratio = f" x{med / mine['stats']['median']:.2f}" if mine and impl != "mixedcore" else ""
            parts.append(f"{impl} {med * 1e6:.1f}us {rate}{ratio}")
        print(f"{group:28s} " + " | ".join(parts))


if __name__ == "__main__":
    main(sys.argv[1])
