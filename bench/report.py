"""Print, per benchmark group, every implementation's median time and its ratio to the group's
reference.

    python bench/report.py RESULTS.json

A ratio is a row's median time over its reference's (above 1: the reference is faster).  The
reference of a row, by what the group holds (``references``):

- a row named ``mixedcore`` (conversions, scans, Keras files): every other row's;
- rows named ``mixedcore <precision>`` (GEMM shapes, inference workloads): the one of the other
  row's precision (float32 / f32, float16, bfloat16 / bf16, ``mixed_`` policies included), else
  the first of them;
- ``conv2d`` (convolutions): every other row's, compared by GFLOP/s, since the square
  ``matmul`` does about, not exactly, the same FLOPs (the ratio is conv2d's rate over the row's);
- ``bfloat16`` beside quantized rows (``int8``, ``int4 ...``; int8 and weight-only quantized
  GEMMs): the quantized rows are the references of the bfloat16 row, one ratio each;
- otherwise the row recorded first (scale-out rows/s: in-process; the threaded scheduler:
  adaptive).

When a row has more than one reference, or its group more than one, each ratio names its
reference.
"""
import json
import os
import re
import sys
from collections import defaultdict

RATES = ("GB/s", "GFLOP/s", "gflops", "gops", "rows/s")
_PRECISIONS = {"float32": "float32", "f32": "float32", "float16": "float16", "f16": "float16",
               "bfloat16": "bfloat16", "bf16": "bfloat16"}


def _precision(name):
    """The precision a row's name states (``mixed_bfloat16`` counts as bfloat16), or None."""
    for word in re.split(r"[\s_.()]+", name):
        if word in _PRECISIONS:
            return _PRECISIONS[word]
    return None


def references(impls):
    """({row: [its reference rows]}, measure) for a group's rows (names, in recorded order);
    measure is "time" or the extra_info rate the ratios are taken on."""
    if "mixedcore" in impls:
        return {i: ["mixedcore"] for i in impls if i != "mixedcore"}, "time"
    ours = [i for i in impls if i.startswith("mixedcore ")]
    if ours:
        by_precision = {}
        for i in ours:
            by_precision.setdefault(_precision(i), i)
        return {i: [by_precision.get(_precision(i), ours[0])]
                for i in impls if i not in ours}, "time"
    if "conv2d" in impls:
        return {i: ["conv2d"] for i in impls if i != "conv2d"}, "gflops"
    quantized = [i for i in impls if re.match(r"int\d", i)]
    if "bfloat16" in impls and quantized:
        return {"bfloat16": quantized}, "time"
    return {i: [impls[0]] for i in impls[1:]}, "time"


def _ratio(row, ref, measure):
    if measure == "time":
        return row["stats"]["median"] / ref["stats"]["median"]
    row_rate = row.get("extra_info", {}).get(measure)
    ref_rate = ref.get("extra_info", {}).get(measure)
    return ref_rate / row_rate if row_rate and ref_rate else None


def group_line(group, impls):
    """One line: each row's median (and recorded rate), its ratio to its reference(s)."""
    refs, measure = references(list(impls))
    named = len({r for rs in refs.values() for r in rs}) > 1
    first = [i for i in impls if i not in refs]
    parts = []
    for impl in first + sorted(refs):
        b = impls[impl]
        extra = b.get("extra_info", {})
        rate = " ".join(f"{extra[k]} {k}" for k in RATES if k in extra)
        ratios = []
        for ref in refs.get(impl, []):
            r = _ratio(b, impls[ref], measure)
            if r is not None:
                ratios.append(f"x{r:.2f}" + (f" vs {ref}" if named else ""))
        parts.append(" ".join(p for p in (f"{impl} {b['stats']['median'] * 1e6:.1f}us", rate,
                                          ", ".join(ratios)) if p))
    return f"{group:28s} " + " | ".join(parts)


def main(path):
    with open(path) as f:
        data = json.load(f)
    groups = defaultdict(dict)
    for b in data["benchmarks"]:
        impl = b.get("extra_info", {}).get("impl") or b["name"]
        groups[b["group"]][impl] = b
    try:
        for group in sorted(groups):
            print(group_line(group, groups[group]))
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (``... | head``): the rest is not wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


if __name__ == "__main__":
    main(sys.argv[1])
