"""scale_out.ModelHandle without Dask: the cache key is the SHA-256 of the pickle's bytes,
hashed by the process that uses the handle; one model per thread; no lock held while
unpickling; the chunk tasks of predict and evaluate leave the model as they found it.
(With Dask and dask.distributed: tests/test_scale_out.py.)"""
import copyreg
import hashlib
import pickle
import threading

import numpy as np
import pytest

from mixedcore import layers, models, scale_out
from mixedcore.trainers import scale_out as so

ModelHandle = scale_out.ModelHandle


def _mlp(seed, features=6):
    model = models.Sequential([layers.Input((features,)), layers.Dense(8, activation="relu"),
                               layers.Dense(3)])
    rng = np.random.default_rng(seed)
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32)
                       for w in model.get_weights()])
    return model


X = np.random.default_rng(9).standard_normal((40, 6)).astype(np.float32)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        a.view(np.uint8), b.view(np.uint8))


class _Legacy:
    """Pickles as a handle whose attributes are given (the form an earlier version wrote, or a
    sender's forgery): a token beside the bytes."""

    def __init__(self, state):
        self.state = state

    def __reduce__(self):
        return copyreg._reconstructor, (ModelHandle, object, None), self.state


def test_the_key_is_the_hash_of_the_bytes_computed_here():
    handle = ModelHandle(_mlp(0))
    assert handle.token == hashlib.sha256(handle._blob).hexdigest()
    assert handle.nbytes == len(handle._blob)
    sent = pickle.dumps(handle)
    assert handle.token.encode() not in sent and handle.token[:16].encode() not in sent
    received = pickle.loads(sent)
    assert vars(received) == {"_blob": handle._blob}
    assert received.token == handle.token
    assert _same(received.model().predict(X, verbose=0), _mlp(0).predict(X, verbose=0))


def test_a_forged_handle_neither_replaces_nor_is_served_another_model():
    a, b = _mlp(1), _mlp(2)
    ya, yb = a.predict(X, verbose=0), b.predict(X, verbose=0)
    ha, hb = ModelHandle(a), ModelHandle(b)
    cached_a = ha.model()
    # b's bytes under a's token, as a pickle of the attributes would carry them
    forged = pickle.loads(pickle.dumps(_Legacy({"_blob": hb._blob, "token": ha.token,
                                                "_token": ha.token, "nbytes": 7})))
    assert type(forged) is ModelHandle and vars(forged) == {"_blob": hb._blob}
    assert forged.token == hb.token != ha.token
    assert _same(forged.model().predict(X, verbose=0), yb)
    assert ha.model() is cached_a and _same(ha.model().predict(X, verbose=0), ya)
    # a token written on the handle itself is not read
    other = ModelHandle(b)
    other.__dict__["token"] = ha.token
    assert other.token == hb.token and other.model() is not cached_a
    # bytes swapped after the handle was hashed are hashed again
    swapped = ModelHandle(a)
    assert swapped.token == ha.token
    swapped._blob = hb._blob
    assert swapped.token == hb.token
    assert _same(swapped.model().predict(X, verbose=0), yb)
    assert _same(ha.model().predict(X, verbose=0), ya)


def test_bad_pickled_handles_are_type_errors():
    with pytest.raises(TypeError, match="ModelHandle: a pickled handle must hold its model's "
                                        "pickle as bytes, got str"):
        pickle.loads(pickle.dumps(_Legacy({"_blob": "not bytes"})))
    with pytest.raises(TypeError, match="got NoneType"):
        pickle.loads(pickle.dumps(_Legacy({"token": "0" * 64})))
    with pytest.raises(TypeError, match="got str"):
        so._handle_from_blob("abc")
    not_a_model = so._handle_from_blob(pickle.dumps({"weights": [1, 2]}))
    with pytest.raises(TypeError, match="ModelHandle.model: the pickle holds a dict, not a "
                                        "mixedcore Model"):
        not_a_model.model()
    with pytest.raises(TypeError, match="ModelHandle: expected a mixedcore Model, got type"):
        ModelHandle(models.Sequential)


def _in_thread(fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    return out[0]


def test_each_thread_has_its_own_model():
    handle = ModelHandle(_mlp(3))
    expected = _mlp(3).predict(X, verbose=0)
    before = so._unpickled
    mine = handle.model()
    assert handle.model() is mine
    theirs = _in_thread(handle.model)
    assert theirs is not mine and so._unpickled == before + 2
    # what a task does to its thread's model stays on that thread
    theirs.set_weights([np.zeros_like(w) for w in theirs.get_weights()])
    assert _same(handle.model().predict(X, verbose=0), expected)
    assert not np.any(theirs.predict(X, verbose=0))


def test_at_most_four_models_a_thread_and_ended_threads_are_dropped():
    handles = [ModelHandle(_mlp(10 + i)) for i in range(5)]

    def use_all():
        for h in handles:
            h.model()
        ident = threading.get_ident()
        return {key[0] for key in so._models if key[1] == ident}

    kept = _in_thread(use_all)
    assert kept == {h.token for h in handles[1:]}             # the least recently used went
    ended = _in_thread(threading.get_ident)
    handles[0].model()                                        # an insertion on this thread
    assert not any(key[1] == ended for key in so._models)
    alive = {t.ident for t in threading.enumerate()}
    assert all(key[1] in alive for key in so._models)


_release = threading.Event()
_started = threading.Event()


def _slow_model(blob):
    """Unpickles the model in ``blob`` once the test lets it (the handle's pickle calls it)."""
    _started.set()
    assert _release.wait(60)
    return pickle.loads(blob)


class _Slow:
    def __init__(self, blob):
        self.blob = blob

    def __reduce__(self):
        return _slow_model, (self.blob,)


def test_unpickling_holds_no_lock():
    slow = so._handle_from_blob(pickle.dumps(_Slow(ModelHandle(_mlp(4))._blob)))
    fast = ModelHandle(_mlp(5))
    _started.clear()
    _release.clear()
    out = []
    loader = threading.Thread(target=lambda: out.append(slow.model()))
    loader.start()
    try:
        assert _started.wait(60)
        # the slow model is being unpickled on the loader thread: others go on
        got = _in_thread(fast.model)
        assert _same(got.predict(X, verbose=0), _mlp(5).predict(X, verbose=0))
        assert _same(fast.model().predict(X, verbose=0), _mlp(5).predict(X, verbose=0))
    finally:
        _release.set()
        loader.join(60)
    assert _same(out[0].predict(X, verbose=0), _mlp(4).predict(X, verbose=0))


def _state(model):
    return ([w.copy() for w in model.get_weights()], model.get_config(),
            model.get_compile_config())


def test_the_chunk_tasks_leave_the_model_as_they_found_it():
    model = _mlp(6)
    model.compile("adam", "mse", metrics=["mae"])
    y = np.random.default_rng(7).standard_normal((40, 3)).astype(np.float32)
    handle = ModelHandle(model)
    cached = handle.model()
    weights, config, compile_config = _state(cached)
    first = so._predict_chunk(handle, 16, X)
    logs = so._evaluate_chunk(handle, 16, 1, 1, X, y)
    assert handle.model() is cached
    after = _state(cached)
    assert all(_same(u, v) for u, v in zip(after[0], weights))
    assert after[1:] == (config, compile_config)
    # the same chunks again give the same bits: nothing carried over from the first run
    assert _same(so._predict_chunk(handle, 16, X), first)
    assert so._evaluate_chunk(handle, 16, 1, 1, X, y) == logs
    assert _same(first, model.predict(X, batch_size=16, verbose=0))
