"""predict / evaluate over Dask arrays (mixedcore.scale_out): lazy results, bit-equal to the
in-memory predict on Dask's local schedulers and on dask.distributed clusters (LocalCluster
with spawned and forked workers, and a scheduler and two workers started from the command
line), the model shipped once per worker, kernel threads adapted to Dask's."""
import os
import pickle
import socket
import subprocess
import sys

import numpy as np
import pytest

from mixedcore import kernels, layers, models, scale_out
from mixedcore.kernels import _runtime

dask = pytest.importorskip("dask", reason='Dask is not installed: pip install "mixedcore[dask]"')
da = pytest.importorskip("dask.array")

pytestmark = pytest.mark.dask

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ["float32", "mixed_bfloat16", "mixed_float16"]


def _mlp(policy, features=24, classes=5):
    return models.Sequential([layers.Input((features,)),
                              layers.Dense(64, activation="relu", dtype=policy),
                              layers.Dense(32, activation="gelu", dtype=policy),
                              layers.Dense(classes, activation="softmax", dtype=policy)])


def _two_io(policy):
    a, b = layers.Input((5,), name="a"), layers.Input((7,), name="b")
    h = layers.Concatenate()([layers.Dense(6, dtype=policy)(a), layers.Dense(6, dtype=policy)(b)])
    return models.Model({"a": a, "b": b}, [layers.Dense(2, dtype=policy, name="p")(h),
                                           layers.Dense(3, dtype=policy, name="q")(h)])


def _x(n, features=24, seed=0):
    return np.random.default_rng(seed).standard_normal((n, features)).astype(np.float32)


def _same_bits(a, b):
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_bits(u, v) for u, v in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


@pytest.fixture
def default_threads(monkeypatch):
    """No explicit thread count in this process (other tests may have called
    set_num_threads), and none in the environment."""
    monkeypatch.setattr(_runtime, "_process_threads_set", False)
    monkeypatch.delenv("MIXEDCORE_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


# -- the local schedulers ------------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_predict_is_bit_equal_to_in_memory_predict(policy, scheduler):
    model = _mlp(policy)
    x = _x(530)
    expected = model.predict(x, verbose=0)
    # chunks that are not multiples of the batch size, and a chunked feature axis
    dx = da.from_array(x, chunks=((50, 130, 200, 150), (10, 14)))
    y = model.predict(dx)
    assert isinstance(y, da.Array)
    assert y.shape == expected.shape and y.dtype == expected.dtype
    assert y.chunks == ((50, 130, 200, 150), (5,))
    assert _same_bits(y.compute(scheduler=scheduler), expected)


def test_predict_is_lazy_and_holds_the_model_once():
    calls = []

    def block(b):
        calls.append(1)
        raise AssertionError("the input was computed")

    model = _mlp("float32")
    x = da.zeros((400, 24), chunks=(100, 24), dtype=np.float32).map_blocks(
        block, dtype=np.float32, meta=np.empty((0, 0), np.float32))
    y = model.predict(x)                       # builds the graph only
    assert not calls
    assert y.shape == (400, 5) and y.dtype == np.float32 and y.numblocks == (4, 1)
    graph = dict(y.__dask_graph__())
    model_keys = [k for k in graph if isinstance(k, str) and k.startswith("mixedcore-model-")]
    assert len(model_keys) == 1
    run_keys = [k for k in graph if isinstance(k, tuple) and k[0].startswith("mixedcore-predict-")
                and not k[0].startswith("mixedcore-predict-out")]
    assert len(run_keys) == 4                  # one task per batch chunk


def test_unbuilt_sequential_builds_from_the_dask_arrays_shape():
    model = models.Sequential([layers.Dense(8, activation="relu"), layers.Dense(3)])
    x = _x(90, 6)
    y = model.predict(da.from_array(x, chunks=40))
    ref = models.Sequential.from_config(model.get_config())
    ref.set_weights(model.get_weights())
    assert _same_bits(y.compute(), ref.predict(x, verbose=0))


@pytest.mark.parametrize("policy", POLICIES)
def test_several_inputs_and_outputs(policy):
    model = _two_io(policy)
    a, b = _x(120, 5, seed=1), _x(120, 7, seed=2)
    expected = model.predict({"a": a, "b": b}, verbose=0)
    da_a, da_b = da.from_array(a, chunks=30), da.from_array(b, chunks=(30, 3))
    out = model.predict({"a": da_a, "b": da_b})
    assert isinstance(out, list) and len(out) == 2
    assert [o.shape for o in out] == [(120, 2), (120, 3)]
    assert [o.chunks[0] for o in out] == [da_a.chunks[0]] * 2
    assert _same_bits(list(dask.compute(*out)), expected)
    # a list in the order of the model's inputs, and numpy beside Dask (takes its chunks)
    assert _same_bits(list(dask.compute(*model.predict([da_a, b]))), expected)


def test_mismatched_batch_chunks_are_a_value_error():
    model = _two_io("float32")
    a = da.from_array(_x(120, 5), chunks=30)
    b = da.from_array(_x(120, 7), chunks=40)
    with pytest.raises(ValueError, match=r"predict: the Dask inputs must share their batch "
                                         r"chunks: input 'a' has \(30, 30, 30, 30\), input 'b' "
                                         r"has \(40, 40, 40\)"):
        model.predict({"a": a, "b": b})
    with pytest.raises(ValueError, match=r"evaluate: the Dask inputs must share their batch "
                                         r"chunks: input 'b' has \(40, 40, 40\), target 'p' "
                                         r"has \(30, 30, 30, 30\)"):
        model.compile("sgd", ["mse", "mse"])
        model.evaluate([_x(120, 5), b], [a[:, :2], np.zeros((120, 3), np.float32)])


def test_bad_dask_inputs_are_clear_errors():
    model = _mlp("float32")
    with pytest.raises(ValueError, match=r"predict: input '.*' expects shape \(None, 24\), got "
                                         r"a Dask array of shape \(10, 7\)"):
        model.predict(da.zeros((10, 7), chunks=5))
    with pytest.raises(ValueError, match=r"predict: steps=2 is not supported with Dask arrays"):
        model.predict(da.zeros((10, 24), chunks=5), steps=2)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        x = da.zeros((10, 24), chunks=5)
        model.predict(x[x[:, 0] > 0])
    two = _two_io("float32")
    with pytest.raises(ValueError, match=r"predict: inputs \['b'\] are missing"):
        two.predict({"a": da.zeros((4, 5), chunks=2)})
    with pytest.raises(ValueError, match=r"predict: input 'b' has shape \(3, 7\); the Dask inputs have "
                                         r"4 samples"):
        two.predict([da.zeros((4, 5), chunks=2), np.zeros((3, 7), np.float32)])
    with pytest.raises(TypeError, match="ModelHandle: expected a mixedcore Model, got int"):
        scale_out.ModelHandle(3)


@pytest.mark.parametrize("policy", POLICIES)
def test_evaluate_reduces_per_chunk_as_in_memory_evaluate(policy):
    model = _mlp(policy)
    model.compile("adam", "categorical_crossentropy", metrics=["accuracy", "mae"])
    x = _x(530)
    rng = np.random.default_rng(3)
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 530)]
    sw = rng.random(530).astype(np.float32)
    expected = model.evaluate(x, y, sample_weight=sw, batch_size=32, verbose=0,
                              return_dict=True)
    chunks = (64, 160, 96, 210)                # every chunk but the last a multiple of 32
    got = model.evaluate(da.from_array(x, chunks=(chunks, 24)), da.from_array(y, chunks=(chunks, 5)),
                         sample_weight=da.from_array(sw, chunks=(chunks,)), batch_size=32,
                         return_dict=True)
    assert got == expected
    # numpy targets take the inputs' chunks
    assert model.evaluate(da.from_array(x, chunks=(chunks, 24)), y, sample_weight=sw,
                          verbose=0) == model.evaluate(x, y, sample_weight=sw, verbose=0)


def test_evaluate_several_outputs():
    model = _two_io("mixed_bfloat16")
    model.compile("sgd", ["mse", "mae"], metrics=["mae"])
    a, b = _x(96, 5), _x(96, 7)
    p, q = _x(96, 2, seed=4), _x(96, 3, seed=5)
    expected = model.evaluate({"a": a, "b": b}, [p, q], verbose=0, return_dict=True)
    got = model.evaluate({"a": da.from_array(a, chunks=32), "b": b},
                         {"p": p, "q": da.from_array(q, chunks=32)}, return_dict=True)
    assert got == expected
    with pytest.raises(ValueError, match=r"evaluate: callbacks=\[\] is not supported"):
        model.evaluate({"a": da.from_array(a, chunks=32), "b": b}, [p, q], callbacks=[])


def test_the_map_blocks_example_of_the_docs_runs_as_written():
    import pathlib
    import re
    text = (pathlib.Path(ROOT) / "docs" / "scale_out.md").read_text()
    start = text.index("\n## Your own map_blocks\n")
    (block,) = re.findall(r"```python\n(.*?)```", text[start:text.index("\n## ", start + 1)],
                          flags=re.S)
    model = models.Sequential([layers.Input((12,)), layers.Dense(256, dtype="mixed_bfloat16"),
                               layers.Dense(256, dtype="float32")])
    x_np = _x(300, 12)
    namespace = {"model": model, "x": da.from_array(x_np, chunks=100), "np": np}
    exec(block, namespace)
    y = namespace["y"]
    assert y.chunks == ((100, 100, 100), (256,))
    assert _same_bits(y.compute(scheduler="threads"), model.predict(x_np, batch_size=512,
                                                                    verbose=0))


# -- threads -------------------------------------------------------------------------------------
def _threads_seen(block):
    with scale_out.model_threads():
        return np.full((block.shape[0], 1), kernels.get_num_threads(), np.int64)


def _counts(scheduler, **kwargs):
    x = da.zeros((64, 1), chunks=8)
    seen = x.map_blocks(_threads_seen, dtype=np.int64).compute(scheduler=scheduler, **kwargs)
    return set(seen.ravel().tolist())


def test_kernels_run_one_thread_per_task_under_the_threaded_scheduler(default_threads):
    assert _counts("threads", num_workers=2) == {1}
    # the synchronous scheduler runs its tasks on this thread, which has the process to itself
    assert _counts("sync") == {kernels.get_num_threads()}


def _expect(n):
    """What get_num_threads reports for a count of n (always 1 in a build without threads)."""
    return n if _runtime.thread_info()["enabled"] else 1


def test_an_explicit_thread_count_wins(default_threads, monkeypatch):
    monkeypatch.setenv("MIXEDCORE_NUM_THREADS", "3")
    assert _counts("threads", num_workers=2) == {_expect(3)}
    monkeypatch.delenv("MIXEDCORE_NUM_THREADS")
    previous = kernels.set_num_threads(2)
    try:
        assert _counts("threads", num_workers=2) == {_expect(2)}
    finally:
        kernels.set_num_threads(previous)
    monkeypatch.setattr(_runtime, "_process_threads_set", False)
    with kernels.threads(2):       # this thread's own count: the synchronous scheduler keeps it
        assert _counts("sync") == {_expect(2)}


# -- dask.distributed ----------------------------------------------------------------------------
distributed = pytest.importorskip("distributed",
                                  reason='distributed is not installed: pip install "mixedcore[dask]"')


def _check_cluster(client):
    # forked workers start with this process's counters
    start = {k: v["models_unpickled"] for k, v in client.run(scale_out.worker_info).items()}
    model = _mlp("mixed_bfloat16")
    x = _x(1000)
    expected = model.predict(x, verbose=0)
    dx = da.from_array(x, chunks=100)
    assert _same_bits(client.compute(model.predict(dx)).result(), expected)
    f16 = _mlp("mixed_float16")
    assert _same_bits(client.compute(f16.predict(dx)).result(), f16.predict(x, verbose=0))
    f16.compile("sgd", "categorical_crossentropy", metrics=["accuracy"])
    y = np.eye(5, dtype=np.float32)[np.arange(1000) % 5]
    assert f16.evaluate(dx, da.from_array(y, chunks=100), return_dict=True) == \
           f16.evaluate(x, y, verbose=0, return_dict=True)
    # ten chunks a computation, three models (f16 compiled is a new pickle): each worker
    # process unpickled each model it ran once at most
    before = client.run(scale_out.worker_info)
    assert len(before) == 2
    for address, info in before.items():
        assert 1 <= info["models_unpickled"] - start[address] <= 3
        assert info["task_threads"] == 1               # the nanny's OMP_NUM_THREADS=1
    # a second computation with the same model reuses each worker's unpickled copy
    assert _same_bits(client.compute(model.predict(dx)).result(), expected)
    after = client.run(scale_out.worker_info)
    assert {k: v["models_unpickled"] for k, v in after.items()} == \
           {k: v["models_unpickled"] for k, v in before.items()}


def _handle_predict(block, handle):
    with scale_out.model_threads():
        return handle.model().predict(block, verbose=0)


def test_in_process_cluster_keys_models_by_their_bytes_one_copy_a_thread(default_threads):
    """Workers in this process (so their cache is this module's): two threads, two models and
    a handle carrying one model's bytes under the other's token."""
    from distributed import Client, LocalCluster
    from mixedcore.trainers import scale_out as so
    a, b = _mlp("float32"), _mlp("mixed_bfloat16")
    b.set_weights([w * 2 for w in b.get_weights()])
    x = _x(800)
    ya, yb = a.predict(x, verbose=0), b.predict(x, verbose=0)
    ha, hb = scale_out.ModelHandle(a), scale_out.ModelHandle(b)
    forged = scale_out.ModelHandle(b)
    forged.__dict__["token"] = ha.token
    dx = da.from_array(x, chunks=50)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert _same_bits(client.compute(a.predict(dx)).result(), ya)

        def run(handle):
            return client.compute(dx.map_blocks(
                _handle_predict, scale_out.delayed_model(handle), dtype=np.float32,
                chunks=(dx.chunks[0], (5,)), meta=np.empty((0, 0), np.float32))).result()

        assert _same_bits(run(forged), yb)
        assert _same_bits(run(ha), ya) and _same_bits(run(hb), yb)
        worker_threads = {t.ident for t in cluster.workers[0].executor._threads}
        for handle in (ha, hb):
            copies = [key for key in so._models if key[0] == handle.token]
            assert 1 <= len(copies) <= 2                    # one a worker thread at most
            assert {key[1] for key in copies} <= worker_threads
            models_seen = [so._models[key] for key in copies]
            assert len({id(m) for m in models_seen}) == len(models_seen)


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_local_cluster_with_worker_processes(method, default_threads):
    from distributed import Client, LocalCluster
    with dask.config.set({"distributed.worker.multiprocessing-method": method}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None, host="127.0.0.1") as cluster, \
                Client(cluster) as client:
            _check_cluster(client)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cluster_started_from_the_command_line(tmp_path, default_threads):
    from distributed import Client
    dask_cli = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    worker_cli = [sys.executable, "-m", "distributed.cli.dask_worker"]
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = []
    try:
        procs.append(subprocess.Popen(dask_cli + ["--host", "127.0.0.1", "--port", str(port),
                                                  "--no-dashboard"], cwd=tmp_path, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(2):
            procs.append(subprocess.Popen(worker_cli + [address, "--nthreads", "1",
                                                        "--host", "127.0.0.1", "--no-dashboard"],
                                          cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
            _check_cluster(client)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_a_2_gib_input_is_never_held_whole_by_any_process(tmp_path):
    """2 GiB of float32 input made chunk by chunk on the workers, predicted, written to a zarr
    store by the workers and summed: every worker's peak RSS stays far below the input's size,
    and a chunk of the stored result equals the in-memory predict of its rows."""
    zarr = pytest.importorskip("zarr")
    from distributed import Client, LocalCluster
    rows, features, step = 1 << 22, 128, 1 << 16         # 4 Mi rows x 128 float32 = 2 GiB
    model = models.Sequential([layers.Input((features,)),
                               layers.Dense(64, activation="relu", dtype="mixed_bfloat16"),
                               layers.Dense(8, dtype="float32")])
    x = da.random.default_rng(0).standard_normal((rows, features), dtype=np.float32,
                                                 chunks=(step, features))
    assert x.nbytes == 2 << 30
    path = str(tmp_path / "y.zarr")
    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None, host="127.0.0.1",
                          memory_limit="3GiB") as cluster, Client(cluster) as client:
            da.to_zarr(model.predict(x), path)
            total = client.compute(da.from_zarr(path).sum()).result()
            some = client.compute(x[5 * step:6 * step]).result()
            peaks = [info["peak_rss"] for info in client.run(scale_out.worker_info).values()]
    print(f"worker peak RSS: {[round(p / 2**20) for p in peaks]} MiB for a "
          f"{x.nbytes / 2**30:.0f} GiB input")
    stored = zarr.open(path, mode="r")
    assert stored.shape == (rows, 8)
    assert _same_bits(stored[5 * step:6 * step], model.predict(some, verbose=0))
    assert np.isfinite(total)
    assert max(peaks) < x.nbytes / 4
