"""Scale-out: rows/s of ``model.predict`` over a Dask array on dask.distributed worker processes
(LocalCluster, one thread each) against the in-process predict with two kernel threads on the
same data, and the threaded scheduler with and without the adaptive thread count.

Run (pytest-benchmark, small sizes; skipped without dask and distributed):

    python -m pytest bench/bench_scale.py --benchmark-only --benchmark-group-by=group

The full, interleaved comparison with best and median of each and their ratios, and the
per-task overhead that docs/scale_out.md's model of more workers rests on:

    python bench/bench_scale.py [--rows N] [--rounds R]

Workload: MLP 256-512-512-16 under mixed_bfloat16 (Dense + relu twice, Dense), float32 input
made on the workers by ``da.random`` and persisted there before timing (the in-process rows get
the same array, computed into memory), chunks of 32768 rows (8192 in the pytest form),
``batch_size=1024`` everywhere.
Targets: 2 single-thread workers >= 0.9x the in-process 2-thread predict; per-worker rows/s
flat from one worker to two.
"""
import argparse
import statistics
import sys
import time

import numpy as np
import pytest

from mixedcore import kernels, layers, models

CHUNK = 8192
BATCH = 1024
FEATURES = 256


def make_model():
    return models.Sequential([layers.Input((FEATURES,)),
                              layers.Dense(512, activation="relu", dtype="mixed_bfloat16"),
                              layers.Dense(512, activation="relu", dtype="mixed_bfloat16"),
                              layers.Dense(16, dtype="mixed_bfloat16")])


def make_input(rows, chunk=CHUNK):
    import dask.array as da
    return da.random.default_rng(0).standard_normal((rows, FEATURES), dtype=np.float32,
                                                    chunks=(chunk, FEATURES))


def start_cluster(workers, trim=True):
    """A LocalCluster of ``workers`` processes of one thread.  ``trim=False`` leaves out the
    ``MALLOC_TRIM_THRESHOLD_`` that distributed's nanny sets by default: glibc then keeps its
    dynamic mmap threshold, and the model's activations reuse heap memory instead of being
    mapped and faulted in afresh every batch."""
    import dask
    from distributed import Client, LocalCluster
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    if not trim:
        environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, host="127.0.0.1")
    return cluster, Client(cluster, set_as_default=False)


def persist(client, x):
    """``x`` computed and held on the cluster's workers."""
    from distributed import futures_of, wait
    x = client.persist(x)
    with client.as_current():
        wait(futures_of(x))
    return x


def distributed_predict(client, model, x):
    return client.compute(model.predict(x, batch_size=BATCH)).result()


def inprocess_predict(model, x_np, threads=2):
    with kernels.threads(threads):
        return model.predict(x_np, batch_size=BATCH, verbose=0)


def threaded_predict(model, x_np, adaptive, chunk=CHUNK):
    """The threaded scheduler over an in-memory array; ``adaptive=False`` sets the process-wide
    count explicitly (2), which turns the one-thread-per-task rule off."""
    import dask.array as da
    dx = da.from_array(x_np, chunks=(chunk, FEATURES))
    if adaptive:
        return model.predict(dx, batch_size=BATCH).compute(scheduler="threads", num_workers=2)
    from mixedcore.kernels import _runtime
    was = _runtime._process_threads_set
    previous = kernels.set_num_threads(2)
    try:
        return model.predict(dx, batch_size=BATCH).compute(scheduler="threads", num_workers=2)
    finally:
        kernels.set_num_threads(previous)
        _runtime._process_threads_set = was


def per_task_overhead(client, model, tasks=400):
    """Seconds per chunk task that computes almost nothing (one-row chunks), on this client."""
    x = persist(client, make_input(tasks, chunk=1))
    distributed_predict(client, model, x)          # warm: the model reaches every worker
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        distributed_predict(client, model, x)
        best = min(best, time.perf_counter() - t)
    return best / tasks


# -- pytest-benchmark (small) -------------------------------------------------------------------
SMOKE_ROWS = 4 * CHUNK


@pytest.fixture(scope="module")
def data():
    pytest.importorskip("dask.array")
    pytest.importorskip("distributed")
    model = make_model()
    x = make_input(SMOKE_ROWS)
    return model, x, x.compute()


@pytest.fixture(scope="module", params=[1, 2])
def cluster(request, data):
    cluster, client = start_cluster(request.param)
    x = persist(client, data[1])
    distributed_predict(client, data[0], x)
    yield request.param, client, x
    client.close()
    cluster.close()


def _record(benchmark, group, impl, fn, rows):
    benchmark.group = group
    benchmark.extra_info["impl"] = impl
    benchmark(fn)
    median = benchmark.stats.stats.median if benchmark.stats else None
    if median:
        benchmark.extra_info["rows/s"] = round(rows / median)


def test_inprocess_2_threads(benchmark, data):
    model, _, x_np = data
    _record(benchmark, "predict rows/s", "in-process, 2 threads",
            lambda: inprocess_predict(model, x_np), SMOKE_ROWS)


def test_distributed_workers(benchmark, data, cluster):
    workers, client, x = cluster
    out = distributed_predict(client, data[0], x)
    assert out.shape == (SMOKE_ROWS, 16)
    _record(benchmark, "predict rows/s", f"LocalCluster, {workers} x 1 thread",
            lambda: distributed_predict(client, data[0], x), SMOKE_ROWS)


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "explicit-2"])
def test_threaded_scheduler(benchmark, data, adaptive):
    model, _, x_np = data
    _record(benchmark, "threaded scheduler rows/s",
            "adaptive (1 kernel thread a task)" if adaptive else "set_num_threads(2)",
            lambda: threaded_predict(model, x_np, adaptive), SMOKE_ROWS)


# -- the full table -----------------------------------------------------------------------------
def _summary(name, times, rows):
    rates = [rows / t for t in times]
    return f"| {name} | {max(rates):,.0f} | {statistics.median(rates):,.0f} |"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64 * CHUNK)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=4 * CHUNK)
    args = parser.parse_args(argv)
    chunk = args.chunk
    model = make_model()
    x = make_input(args.rows, chunk)
    x_np = x.compute()
    names = ["in-process, 2 threads", "1 worker x 1 thread", "2 workers x 1 thread",
             "2 workers x 1 thread, no MALLOC_TRIM_THRESHOLD_",
             "threaded scheduler, adaptive", "threaded scheduler, set_num_threads(2)"]
    times = {n: [] for n in names}
    inproc = []                       # in-process rows of phase 1 (phase 2 adds to times[0])

    def rounds(runs, record):
        for _ in range(args.rounds):                # interleaved: a noisy phase hits every row
            for n, fn in runs.items():
                t = time.perf_counter()
                fn()
                record(n).append(time.perf_counter() - t)

    # phase 1, no cluster in this process: the threaded scheduler against in-process
    inprocess_predict(model, x_np)
    threaded_predict(model, x_np, True, chunk)
    rounds({"in-process": lambda: inprocess_predict(model, x_np),
            names[4]: lambda: threaded_predict(model, x_np, True, chunk),
            names[5]: lambda: threaded_predict(model, x_np, False, chunk)},
           lambda n: inproc if n == "in-process" else times[n])
    # phase 2: the clusters (their schedulers run in this process, as a LocalCluster's do)
    clusters = {1: start_cluster(1), 2: start_cluster(2), "2n": start_cluster(2, trim=False)}
    persisted = {}
    for w, (_, client) in clusters.items():
        persisted[w] = persist(client, x)
        distributed_predict(client, model, persisted[w])
    rounds({names[0]: lambda: inprocess_predict(model, x_np),
            names[1]: lambda: distributed_predict(clusters[1][1], model, persisted[1]),
            names[2]: lambda: distributed_predict(clusters[2][1], model, persisted[2]),
            names[3]: lambda: distributed_predict(clusters["2n"][1], model, persisted["2n"])},
           lambda n: times[n])
    overhead = {w: per_task_overhead(clusters[w][1], model) for w in (1, 2)}
    for cluster, client in clusters.values():
        client.close()
        cluster.close()
    rows = args.rows
    print(f"{rows:,} rows x {FEATURES}, chunks of {chunk}, {args.rounds} interleaved rounds\n")
    print("| run | best rows/s | median rows/s |\n|---|---|---|")
    print(_summary("in-process, 2 threads (phase 1)", inproc, rows))
    for n in names[4:]:
        print(_summary(n, times[n], rows))
    print(_summary("in-process, 2 threads (phase 2)", times[names[0]], rows))
    for n in names[1:4]:
        print(_summary(n, times[n], rows))
    ratio = [a / b for a, b in zip(times[names[0]], times[names[2]])]
    flat = [a / (b * 2) for a, b in zip(times[names[1]], times[names[2]])]
    ratio_n = [a / b for a, b in zip(times[names[0]], times[names[3]])]
    adapt = [b / a for a, b in zip(times[names[4]], times[names[5]])]
    print(f"\n2 workers / in-process 2 threads (per round): best {max(ratio):.3f}, "
          f"median {statistics.median(ratio):.3f}")
    print(f"2 workers without MALLOC_TRIM_THRESHOLD_ / in-process 2 threads: best "
          f"{max(ratio_n):.3f}, median {statistics.median(ratio_n):.3f}")
    print(f"per-worker rows/s, 2 workers / 1 worker: best {max(flat):.3f}, "
          f"median {statistics.median(flat):.3f}")
    print(f"threaded scheduler, adaptive / explicit 2 threads (speed): best {max(adapt):.3f}, "
          f"median {statistics.median(adapt):.3f}")
    print(f"per-task overhead (one-row chunks): 1 worker {overhead[1] * 1e3:.2f} ms, "
          f"2 workers {overhead[2] * 1e3:.2f} ms a task")
    # model: W workers each compute a chunk in C / r seconds plus o of task overhead; the
    # scheduler hands out at most 1 / o tasks a second (o measured with one worker, an upper
    # bound of the scheduler's own share)
    r = rows / statistics.median(times[names[1]])
    o = overhead[1]
    print(f"\nmodel: r = {r:,.0f} rows/s a worker (median, 1 worker, including its overhead), "
          f"o = {o * 1e3:.2f} ms a task, chunk {chunk} rows")
    print("| workers | predicted rows/s | per worker |\n|---|---|---|")
    for w in (1, 2, 4, 8, 16, 32, 64, 128):
        rate = min(w * r, chunk / o)
        print(f"| {w} | {rate:,.0f} | {rate / w:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
