"""Crafted ``.npz`` files: Keras's ``model.weights.npz`` variant (pickles), plain ``.npz`` weights,
and the command line's ``.npy`` / ``.npz`` inputs.

Every attack is made here, in ``tmp_path``, and loaded in a child interpreter with a memory and a
time limit (``isolated.py``): it must end in a ValueError (CommandError for the command line)
naming the file, never in a crash, a hang or a MemoryError.  The crafted pickles are written by a
small pickler that can name any global (``G``) and call it with any arguments and state (``Call``),
so no torch or Keras is needed to make them; a file written the same way with honest values loads
with those values, and a file Keras writes loads too.
"""
import io
import json
import pickle
import struct
import zipfile

import numpy as np
import pytest

from isolated import assert_finishes, assert_refused
from mixedcore import layers, models
from mixedcore.cli.common import CommandError

KERNEL = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
BIAS = np.array([0.5, -1.0, 2.0], np.float32)
KERNEL2 = np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5
BIAS2 = np.array([3.0, -3.0], np.float32)


# -- writing crafted pickles ---------------------------------------------------------------------

class G:
    """A global a crafted pickle names (``module.name``), whatever exists."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):         # the pickler wants a callable; never called
        raise AssertionError("only pickled")


class Call:
    """``fn(*args)`` in a crafted pickle, followed by a BUILD with ``state`` when given."""

    def __init__(self, fn, *args, state=None):
        self.fn, self.args, self.state = fn, args, state

    def __reduce__(self):
        if self.state is None:
            return self.fn, self.args
        return self.fn, self.args, self.state


class _Writer(pickle._Pickler):
    dispatch = pickle._Pickler.dispatch.copy()

    def save_global_name(self, obj):
        self.save(obj.module)
        self.save(obj.name)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)

    dispatch[G] = save_global_name


def dumps(obj, persistent=None):
    out = io.BytesIO()
    writer = _Writer(out, 4)
    if persistent is not None:
        writer.persistent_id = persistent
    writer.dump(obj)
    return out.getvalue()


class _StorageRef:
    pass


def torch_blob(values, storage="FloatStorage", numel=None, count=None, module="torch"):
    """What torch pickles a storage as: magic, protocol, system info, the storage's pickle (a
    persistent id), the list of keys, then the element count and the elements."""
    values = np.ascontiguousarray(values)
    out = io.BytesIO()
    for obj in (0x1950A86A20F9469CFC6C, 1001,
                {"protocol_version": 1001, "little_endian": True,
                 "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        out.write(pickle.dumps(obj, protocol=2))
    pid = ("storage", G(module, storage), "0", "cpu",
           values.size if numel is None else numel, None)
    out.write(dumps(_StorageRef(), lambda obj: pid if isinstance(obj, _StorageRef) else None))
    out.write(pickle.dumps(["0"], protocol=2))
    out.write(struct.pack("<q", values.size if count is None else count))
    out.write(values.tobytes())
    return out.getvalue()


def ordered_dict():
    return Call(G("collections", "OrderedDict"))


def tensor(storage, size, stride, offset=0):
    rebuilt = Call(G("torch._utils", "_rebuild_tensor_v2"), storage, offset, size, stride, False,
                   ordered_dict())
    return Call(G("torch._utils", "_rebuild_parameter"), rebuilt, True, ordered_dict())


def torch_value(array):
    array = np.asarray(array, np.float32)
    stride = tuple(s // 4 for s in array.strides)
    return tensor(Call(G("torch.storage", "_load_from_bytes"), torch_blob(array.ravel())),
                  array.shape, stride)


def variable(name, value):
    return Call(G("keras.src.backend", "Variable"), state={"_name": name, "_value": value})


def holder(entries):
    """Keras's member: a 0-d object array holding a dict (numpy's own reconstruction)."""
    dtype = Call(G("numpy", "dtype"), "O8", False, True,
                 state=(3, "|", None, None, None, -1, -1, 63))
    return Call(G("numpy._core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (0,), b"b",
                state=(1, (), dtype, False, [entries]))


def member(pickle_bytes):
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": "|O", "fortran_order": False, "shape": ()})
    return out.getvalue() + pickle_bytes


def honest_members(kernel=KERNEL):
    return {
        "__root__": dumps(holder({})),
        "layers/dense": dumps(holder({"0": variable("kernel", torch_value(kernel)),
                                      "1": variable("bias", torch_value(BIAS))})),
        "layers/dense_1": dumps(holder({"0": variable("kernel", torch_value(KERNEL2)),
                                        "1": variable("bias", torch_value(BIAS2))})),
    }


def small_model(width=4):
    return models.Sequential([layers.Input(shape=(width,)), layers.Dense(3), layers.Dense(2)])


def write_keras(tmp_path, members, name="m.keras", model=None, extra=None):
    """A .keras archive with mixedcore's config of ``model`` and a model.weights.npz of
    ``members`` ({path: pickle bytes or raw member bytes})."""
    model = small_model() if model is None else model
    model.save(tmp_path / "source.keras")
    with zipfile.ZipFile(tmp_path / "source.keras") as z:
        config, metadata = z.read("config.json"), z.read("metadata.json")
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        for path, data in members.items():
            z.writestr(path + ".npy", data if data.startswith(b"\x93NUMPY") else member(data))
        for write in extra or ():
            write(z)
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", metadata)
        z.writestr("config.json", config)
        z.writestr("model.weights.npz", inner.getvalue())
    return str(path)


def refused_load(path, match=(), memory=None):
    body = f"""
        from mixedcore import models
        models.load_model({path!r})
    """
    return assert_refused(body, error=ValueError, match=[path, *match],
                          **({} if memory is None else {"memory": memory}))


# -- Keras's npz variant: honest files -----------------------------------------------------------

def test_honest_crafted_npz_variant_loads_its_values(tmp_path):
    path = write_keras(tmp_path, honest_members())
    model = models.load_model(path)
    for got, want in zip(model.get_weights(), [KERNEL, BIAS, KERNEL2, BIAS2]):
        np.testing.assert_array_equal(got, want)


def test_honest_transposed_tensor_and_numpy_values_load(tmp_path):
    """A tensor stored transposed (strides (1, 4)) and a variable whose value is a numpy array
    (what Keras's numpy backend pickles), big-endian, load with their values."""
    transposed = np.ascontiguousarray(KERNEL.T)
    value = tensor(Call(G("torch.storage", "_load_from_bytes"), torch_blob(transposed.ravel())),
                   (4, 3), (1, 4))
    f4 = Call(G("numpy", "dtype"), "f4", False, True, state=(3, ">", None, None, None, -1, -1, 0))
    array = Call(G("numpy._core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (0,), b"b",
                 state=(1, (3,), f4, False, BIAS.astype(">f4").tobytes()))
    members = honest_members()
    members["layers/dense"] = dumps(holder({"0": variable("kernel", value),
                                            "1": variable("bias", array)}))
    model = models.load_model(write_keras(tmp_path, members))
    np.testing.assert_array_equal(model.get_weights()[0], KERNEL)
    np.testing.assert_array_equal(model.get_weights()[1], BIAS)


@pytest.mark.keras
def test_keras_npz_variant_loads(keras, tmp_path):
    from keras.src.saving import saving_lib
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="relu"),
                              keras.layers.LayerNormalization(), keras.layers.Dense(2)])
    saving_lib.save_model(model, str(tmp_path / "k.keras"), weights_format="npz")
    ours = models.load_model(tmp_path / "k.keras")
    for got, want in zip(ours.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, np.asarray(want))
    fresh = models.Sequential([layers.Input(shape=(5,)), layers.Dense(4, activation="relu"),
                               layers.LayerNormalization(), layers.Dense(2)])
    fresh.load_weights(tmp_path / "k.keras")
    for got, want in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, np.asarray(want))


# -- Keras's npz variant: attacks ----------------------------------------------------------------

def _with_kernel(value):
    members = honest_members()
    members["layers/dense"] = dumps(holder({"0": variable("kernel", value),
                                            "1": variable("bias", torch_value(BIAS))}))
    return members


def test_stride_zero_tensor_is_refused(tmp_path):
    """A 300-byte pickle whose tensor repeats one element 2e9 times."""
    one = Call(G("torch.storage", "_load_from_bytes"), torch_blob(np.ones(1, np.float32)))
    path = write_keras(tmp_path, _with_kernel(tensor(one, (50000, 10000), (0, 0))))
    refused_load(path, ["(50000, 10000)", "zero, negative or overlapping strides"])


@pytest.mark.parametrize("size, stride, offset, text", [
    ((4, 3), (1, 1), 0, "overlapping"),
    ((4, 3), (3, -1), 2, "zero, negative or overlapping"),
    ((4, 3), (3, 1), 1, "reaches element 12 of a storage of 12"),
    ((4, 3), (3, 1), -1, "offset -1"),
])
def test_tensors_outside_their_storage_are_refused(tmp_path, size, stride, offset, text):
    storage = Call(G("torch.storage", "_load_from_bytes"), torch_blob(KERNEL.ravel()))
    path = write_keras(tmp_path, _with_kernel(tensor(storage, size, stride, offset)))
    refused_load(path, [text])


@pytest.mark.parametrize("numel, count, text", [
    (10**12, None, "a storage of 12 elements, 1000000000000 declared"),
    (None, 10**12, "a storage of 1000000000000 elements"),
])
def test_storage_counts_must_match_its_bytes(tmp_path, numel, count, text):
    storage = Call(G("torch.storage", "_load_from_bytes"),
                   torch_blob(KERNEL.ravel(), numel=numel, count=count))
    path = write_keras(tmp_path, _with_kernel(tensor(storage, (4, 3), (3, 1))))
    refused_load(path, [text])


def test_declared_array_shapes_are_checked_before_allocation(tmp_path):
    """numpy.ndarray((1e5, 1e5)) called directly, and numpy's reconstruction given a huge shape
    with a few bytes or a short object list."""
    direct = Call(G("numpy", "ndarray"), (100000, 100000))
    refused_load(write_keras(tmp_path, _with_kernel(direct), "a.keras"),
                 ["numpy.ndarray, which a weights file may only name as an argument"])
    f8 = Call(G("numpy", "dtype"), "f8", False, True)
    big = Call(G("numpy._core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (0,), b"b",
               state=(1, (100000, 100000), f8, False, b"\0" * 8))
    refused_load(write_keras(tmp_path, _with_kernel(big), "b.keras"),
                 ["shape (100000, 100000) given 8 bytes"])
    objects = Call(G("numpy", "dtype"), "O8", False, True)
    listed = Call(G("numpy._core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (0,),
                  b"b", state=(1, (100000, 100000), objects, False, [1, 2]))
    refused_load(write_keras(tmp_path, _with_kernel(listed), "c.keras"),
                 ["object array of shape (100000, 100000)"])


def test_memoised_storage_rebuilt_many_times_is_bounded(tmp_path):
    """The kernel's 8 MiB storage, rebuilt into 300 more tensors through the memo: 2.5 GB."""
    model = models.Sequential([layers.Input(shape=(1024,)), layers.Dense(2048), layers.Dense(2)])
    kernel = np.ones((1024, 2048), np.float32)
    storage = Call(G("torch.storage", "_load_from_bytes"), torch_blob(kernel.ravel()))
    rebuild, empty = G("torch._utils", "_rebuild_tensor_v2"), ordered_dict()
    size, stride = (1024, 2048), (2048, 1)
    many = [Call(rebuild, storage, 0, size, stride, False, empty) for _ in range(300)]
    members = honest_members()
    members["layers/dense"] = dumps(holder({
        "0": variable("kernel", tensor(storage, size, stride)),
        "1": variable("bias", torch_value(np.zeros(2048, np.float32))), "junk": many}))
    path = write_keras(tmp_path, members, model=model)
    refused_load(path, ["more than the", "its member can hold"])


def _deflated_zeros(name, nbytes):
    def write(z):
        info = zipfile.ZipInfo(name + ".npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            block = bytes(1 << 22)
            for _ in range(nbytes // len(block)):
                f.write(block)
    return write


def test_deflated_members_are_bounded_by_the_model(tmp_path):
    """Members of 200 MB of deflated zeros, at a path the model has and at paths it has not."""
    members = honest_members()
    del members["layers/dense_1"]
    path = write_keras(tmp_path, members, extra=[_deflated_zeros("layers/dense_1", 200 << 20)])
    refused_load(path, ["layers/dense_1.npy is 209715200 bytes",
                        "2 variables there need at most"])
    extra = [_deflated_zeros(f"layers/extra_{k}", 200 << 20) for k in range(3)]
    path = write_keras(tmp_path, honest_members(), "x.keras", extra=extra)
    refused_load(path, ["for which the model has no layer", "layers/extra_0"])


def _raw_member(tmp_path, name, pickle_bytes):
    members = honest_members()
    members["layers/dense"] = pickle_bytes
    return write_keras(tmp_path, members, name)


def test_build_on_a_whitelisted_function_is_refused(tmp_path):
    """BUILD states that would set attributes of the functions and classes the reader knows
    (a dict state, and the (None, slots) form that calls setattr)."""
    cases = {
        "fn.keras": b"\x80\x04ctorch._utils\n_rebuild_tensor_v2\n}X\x0c\x00\x00\x00__defaults__"
                    b"K\x01sb.",
        "slots.keras": b"\x80\x04ctorch._utils\n_rebuild_tensor_v2\nN}X\x0c\x00\x00\x00"
                       b"__defaults__(K\x01ts\x86b.",
        "cls.keras": b"\x80\x04ckeras.src.backend\nVariable\nN}X\x0c\x00\x00\x00__setstate__"
                     b"Ns\x86b.",
        "marker.keras": b"\x80\x04cnumpy\nndarray\nN}X\x04\x00\x00\x00nameX\x01\x00\x00\x00x"
                        b"s\x86b.",
    }
    for name, raw in cases.items():
        path = _raw_member(tmp_path, name, raw)
        body = f"""
            from mixedcore.saving import npz_store
            from mixedcore import models
            try:
                models.load_model({path!r})
            finally:
                assert npz_store._rebuild_tensor.__defaults__ is None
                assert "__setstate__" in vars(npz_store._PickledVariable)
                assert callable(vars(npz_store._PickledVariable)["__setstate__"])
        """
        assert_refused(body, ValueError, [path])


@pytest.mark.parametrize("raw, text", [
    (b"\x80\x04cos\nsystem\nX\x04\x00\x00\x00trueR.", "refusing to unpickle os.system"),
    (b"\x80\x04cbuiltins\ngetattr\n.", "refusing to unpickle builtins.getattr"),
    (b"\x80\x04cnumpy\nndarray.__setstate__\n.", "refusing to unpickle numpy.ndarray.__setstate__"),
    (b"\x80\x04cnumpy\nload\n.", "refusing to unpickle numpy.load"),
    (b"\x80\x04cnumpy._core.multiarray\n_reconstruct\ncos\nsystem\nK\x00\x85C\x01b\x87R.",
     "refusing to unpickle os.system"),
    (b"\x80\x04\x82\x01.", "the opcode EXT1"),
    (b"\x80\x04(cos\nsystem\nX\x01\x00\x00\x00xo.", "the opcode OBJ"),
    (b"\x80\x04X\x01\x00\x00\x00xQ.", "the opcode BINPERSID"),
    (b"\x80\x04N\x8e\x00\x00\x00\x00\x00\x00\x01\x00.", "malformed pickle"),
    (b"\x80\x04Nr\xff\xff\xff\xff.", "memo entry 4294967295"),
])
def test_pickles_reaching_other_globals_or_opcodes_are_refused(tmp_path, raw, text):
    refused_load(_raw_member(tmp_path, "p.keras", raw), [text])


def test_nested_torch_blob_cannot_name_rebuild_functions(tmp_path):
    """A storage blob whose own pickle calls the reader's functions again."""
    nested = torch_blob(KERNEL.ravel(), "_load_from_bytes", module="torch.storage")
    storage = Call(G("torch.storage", "_load_from_bytes"), nested)
    refused_load(write_keras(tmp_path, _with_kernel(tensor(storage, (4, 3), (3, 1)))),
                 ["refusing to unpickle torch.storage._load_from_bytes in a torch storage"])


# -- plain .npz weights --------------------------------------------------------------------------

def _npz_member(z, name, shape, dtype="<f4", data=b"", fortran=False, compress=False):
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": dtype, "fortran_order": fortran, "shape": shape})
    info = zipfile.ZipInfo(name + ".npy")
    if compress:
        info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, head.getvalue() + data)


def test_plain_npz_weights_load_with_their_values(tmp_path):
    model = small_model()
    want = [KERNEL, BIAS, KERNEL2, BIAS2]
    np.savez(tmp_path / "w.npz", *want)
    model.load_weights(tmp_path / "w.npz")
    for got, w in zip(model.get_weights(), want):
        np.testing.assert_array_equal(got, w)
    # Fortran order and float64 are read as numpy reads them
    with zipfile.ZipFile(tmp_path / "f.npz", "w") as z:
        for k, w in enumerate(want):
            _npz_member(z, f"arr_{k}", w.shape, "<f8", np.asfortranarray(w, np.float64)
                        .tobytes(order="F"), fortran=True, compress=True)
    small_model().load_weights(tmp_path / "f.npz")


@pytest.mark.parametrize("shape, text", [
    ((10**15, 4), "(1000000000000000, 4)"),
    ((4, 3, 10**6), "(4, 3, 1000000)"),
])
def test_plain_npz_huge_declared_shape_is_refused(tmp_path, shape, text):
    path = str(tmp_path / "w.npz")
    with zipfile.ZipFile(path, "w") as z:
        _npz_member(z, "arr_0", shape, data=b"\0" * 64)
        for k, w in enumerate([BIAS, KERNEL2, BIAS2], 1):
            _npz_member(z, f"arr_{k}", w.shape, data=w.tobytes())
    body = f"""
        from mixedcore import layers, models
        model = models.Sequential([layers.Input(shape=(4,)), layers.Dense(3), layers.Dense(2)])
        model.load_weights({path!r})
    """
    assert_refused(body, ValueError, [path, text])


def test_plain_npz_bomb_is_refused_before_inflating(tmp_path):
    """600 MB of deflated zeros (600 kB on disk) in place of a 48-byte kernel; and an object
    array, which would be a pickle."""
    path = str(tmp_path / "bomb.npz")
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "<f4", "fortran_order": False, "shape": (150 << 20,)})
    with zipfile.ZipFile(path, "w") as z:
        info = zipfile.ZipInfo("arr_0.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            f.write(head.getvalue())
            block = bytes(1 << 22)
            for _ in range(150):
                f.write(block)
        for k, w in enumerate([BIAS, KERNEL2, BIAS2], 1):
            _npz_member(z, f"arr_{k}", w.shape, data=w.tobytes())
    body = f"""
        from mixedcore import layers, models
        model = models.Sequential([layers.Input(shape=(4,)), layers.Dense(3), layers.Dense(2)])
        model.load_weights({path!r})
    """
    assert_refused(body, ValueError, [path, "(157286400,)", "refusing a decompression bomb"])
    with zipfile.ZipFile(tmp_path / "obj.npz", "w") as z:
        _npz_member(z, "arr_0", (4, 3), "|O", pickle.dumps([1] * 12))
        for k, w in enumerate([BIAS, KERNEL2, BIAS2], 1):
            _npz_member(z, f"arr_{k}", w.shape, data=w.tobytes())
    with pytest.raises(ValueError, match=r"obj\.npz: .*Python objects"):
        small_model().load_weights(tmp_path / "obj.npz")


def test_plain_npz_sizes_must_agree(tmp_path):
    with zipfile.ZipFile(tmp_path / "short.npz", "w") as z:
        _npz_member(z, "arr_0", (4, 3), data=KERNEL.tobytes()[:20])
        for k, w in enumerate([BIAS, KERNEL2, BIAS2], 1):
            _npz_member(z, f"arr_{k}", w.shape, data=w.tobytes())
    with pytest.raises(ValueError, match=r"short\.npz: arr_0 declares a float32 array of shape "
                                         r"\(4, 3\) \(48 bytes\) in a member of \d+ bytes"):
        small_model().load_weights(tmp_path / "short.npz")
    np.savez(tmp_path / "text.npz", np.array([["a"] * 3] * 4), BIAS, KERNEL2, BIAS2)
    with pytest.raises(ValueError, match=r"text\.npz: arr_0 holds <U1 data, not numbers"):
        small_model().load_weights(tmp_path / "text.npz")


# -- command-line inputs -------------------------------------------------------------------------

def _read_inputs_body(tmp_path, path):
    model_path = str(tmp_path / "in.keras")
    small_model().save(model_path)
    return f"""
        from mixedcore import models
        from mixedcore.cli.common import read_inputs
        model = models.load_model({model_path!r})
        arrays = read_inputs({path!r}, model)
        print(sum(float(a.sum()) for a in arrays))
    """


def test_cli_inputs_load_with_their_values(tmp_path):
    from mixedcore.cli.common import read_inputs
    model = small_model()
    x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez_compressed(tmp_path / "x.npz", x)
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    for name in ("x.npy", "x.npz", "f.npy"):
        (got,) = read_inputs(str(tmp_path / name), model)
        np.testing.assert_array_equal(np.asarray(got), x)


def test_cli_npy_header_larger_than_the_file_is_refused(tmp_path):
    path = str(tmp_path / "huge.npy")
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**15, 4)})
        f.write(b"\0" * 64)
    message = assert_refused(_read_inputs_body(tmp_path, path), CommandError,
                             [path, "(1000000000000000, 4)", "holds 64 bytes of data"])
    assert "16000000000000000 bytes" in message


@pytest.mark.parametrize("kind", ["npz", "npz_huge_header", "demo"])
def test_cli_npz_bombs_are_refused(tmp_path, kind):
    """20 M samples of 4 zeros (320 MB) deflated to 300 kB: more than the zip rule lets a member
    expand; and a header declaring (1e15, 4) over 64 bytes."""
    path = str(tmp_path / "in.npz")
    if kind == "npz_huge_header":
        with zipfile.ZipFile(path, "w") as z:
            _npz_member(z, "x", (10**15, 4), data=b"\0" * 64)
        text = ["(1000000000000000, 4)", "the sizes disagree"]
    else:
        n = 20 << 20
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            head, {"descr": "<f4", "fortran_order": False, "shape": (n, 4)})
        with zipfile.ZipFile(path, "w") as z:
            info = zipfile.ZipInfo(("x_train" if kind == "demo" else "x") + ".npy")
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w", force_zip64=True) as f:
                f.write(head.getvalue())
                block = bytes(1 << 22)
                for _ in range(n * 16 // len(block)):
                    f.write(block)
            if kind == "demo":
                _npz_member(z, "y_train", (n,), "<i8", compress=True)
        text = ["refusing a decompression bomb", f"({n}, 4)"]
    if kind == "demo":
        body = f"""
            from mixedcore.cli import demo
            demo.load_npz({path!r})
        """
        assert_refused(body, ValueError, [path, *text])
        return
    assert_refused(_read_inputs_body(tmp_path, path), CommandError, [path, *text])


def test_honest_inputs_finish_in_a_child(tmp_path):
    path = str(tmp_path / "ok.npz")
    np.savez_compressed(path, np.ones((100, 4), np.float32))
    outcome = assert_finishes(_read_inputs_body(tmp_path, path))
    assert "400.0" in outcome.stdout
