"""Untrusted files: a damaged or crafted file is refused with a ValueError naming it, never a
crash, a hang or another exception type; archives with ambiguous member names are refused;
temporary files cannot be redirected by a planted link; the command line answers a bad file or
option with one line and exit code 2.

What could crash the process runs in a child (``tests/isolated.py``).
"""
import os
import subprocess
import sys
import zipfile

import h5py
import numpy as np
import pytest

from isolated import TESTS, assert_refused, package_parent, run_isolated
from mixedcore import layers, models
from mixedcore.saving import file_utils, saving_api

DATA = os.path.join(TESTS, "data", "tf_keras")
LEGACY = os.path.join(DATA, "mlp_float32.h5")
ARCHIVE = os.path.join(DATA, "mlp_float32.keras")

# One byte of tf.keras's legacy mlp_float32.h5 set to 0xff: libhdf5 2.0 dies of SIGSEGV reading
# the root's model_config attribute (1009), or a layer's weight_names (1817); at 1883 the
# global heap of an attribute claims about 4 GiB, which libhdf5 allocates and fills.
CRASH_MODEL_CONFIG, CRASH_WEIGHT_NAMES, HUGE_HEAP = 1009, 1817, 1883


def _corrupt(tmp_path, offset, value=0xFF, source=LEGACY, name="bad.h5"):
    data = bytearray(open(source, "rb").read())
    data[offset] = value
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return str(path)


def _mlp():
    return models.Sequential([layers.Input(shape=(5,)), layers.Dense(3), layers.Dense(2)])


# -- legacy .h5: libhdf5 runs on the file in a separate process first ------------------------

@pytest.mark.parametrize("offset", [CRASH_MODEL_CONFIG, CRASH_WEIGHT_NAMES])
def test_a_byte_that_crashes_libhdf5_is_refused(tmp_path, offset):
    path = _corrupt(tmp_path, offset)
    message = assert_refused(f"""
        from mixedcore import models
        models.load_model({path!r})
    """, match=["load_model: ", path, "crashed libhdf5 in a separate process", "SIGSEGV"])
    assert "not read" in message
    assert_refused(f"""
        from mixedcore import models
        m = models.load_model({LEGACY!r})
        m.load_weights({path!r})
    """, match=["load_weights: ", path, "crashed libhdf5"])


def test_the_crash_is_real_without_the_check(tmp_path):
    """safe_mode=False reads the file in the process, as Keras does: the process dies."""
    path = _corrupt(tmp_path, CRASH_MODEL_CONFIG)
    outcome = run_isolated(f"""
        from mixedcore import models
        models.load_model({path!r}, safe_mode=False)
    """)
    assert outcome.crashed, outcome.describe()


def test_a_heap_claiming_gigabytes_is_refused_within_bounded_memory(tmp_path):
    path = _corrupt(tmp_path, HUGE_HEAP)
    assert_refused(f"""
        from mixedcore import models
        models.load_model({path!r})
    """, match=["load_model: ", path, "truncated or corrupt"], memory=1536 << 20, timeout=120)


def test_a_hang_in_the_checking_process_is_refused(tmp_path):
    """The checking process is killed after its time limit (made short here by a program that
    sleeps) and the file refused."""
    assert_refused(f"""
        from mixedcore.saving import h5_store
        h5_store._VET_TIMEOUT = 1
        h5_store._VET_PROGRAM = "import time; print('ready', flush=True); time.sleep(30)"
        from mixedcore import models
        models.load_model({LEGACY!r})
    """, match=["load_model: ", LEGACY, "did not finish within 1 s"])


def test_valid_files_pass_the_check_and_are_checked_once(tmp_path, monkeypatch):
    from mixedcore.saving import h5_store
    calls = []
    real = h5_store._vet

    def counting(owner, source, *args):
        calls.append(source)
        return real(owner, source, *args)
    monkeypatch.setattr(h5_store, "_vet", counting)
    reference = models.load_model(ARCHIVE)
    for source in (LEGACY, ARCHIVE, os.path.join(DATA, "mlp_float32.weights.h5")):
        target = str(tmp_path / os.path.basename(source))
        with open(target, "wb") as f:
            f.write(open(source, "rb").read())
        for _ in range(2):                              # the same unchanged file: checked once
            if source.endswith(".weights.h5"):
                reference.load_weights(target)
            else:
                assert models.load_model(target).weights
        assert sum(target in c for c in calls) == 1, calls
    written = str(tmp_path / "mine.keras")
    reference.save(written)
    models.load_model(written)                          # a file this process wrote: not checked
    assert not any(written in c for c in calls)
    os.utime(written, ns=(1, 1))                        # changed since: checked
    models.load_model(written)
    assert sum(written in c for c in calls) == 1


# -- the error contract: whatever the readers raise becomes a ValueError naming the file -------

def test_reader_errors_become_value_errors_naming_the_file(tmp_path):
    path = str(tmp_path / "w.h5")
    with h5py.File(path, "w") as h5:
        h5.attrs["x"] = 1

    def h5py_error():
        with h5py.File(path, "r") as h5:
            h5["missing"]                               # KeyError raised inside h5py
    with pytest.raises(ValueError, match=f"load_model: {path}: cannot be read.*KeyError"):
        with file_utils._reading("load_model", path):
            h5py_error()
    with pytest.raises(ValueError, match=f"load_weights: {path}: cannot be read.*BadZipFile"):
        with file_utils._reading("load_weights", path):
            zipfile.ZipFile(path)
    # an error of the library's own code is not disguised as a corrupt file
    with pytest.raises(TypeError, match="ours"):
        with file_utils._reading("load_model", path):
            raise TypeError("ours")
    mine = ValueError("load_model: already named")
    with pytest.raises(ValueError) as info:
        with file_utils._reading("load_model", path):
            raise mine
    assert info.value is mine


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.9])
def test_truncated_files_are_value_errors_naming_them(tmp_path, cut):
    for source, how in ((LEGACY, "model"), (ARCHIVE, "model"),
                        (os.path.join(DATA, "mlp_float32.weights.h5"), "weights"),
                        (os.path.join(DATA, "mlp_float32_ckpt.h5"), "weights")):
        data = open(source, "rb").read()
        path = str(tmp_path / ("t_" + os.path.basename(source)))
        open(path, "wb").write(data[:int(len(data) * cut)])
        load = (f"models.load_model({path!r})" if how == "model" else
                f"models.load_model({ARCHIVE!r}).load_weights({path!r})")
        assert_refused(f"""
            from mixedcore import models
            {load}
        """, match=[path])


# -- zip member names -------------------------------------------------------------------------

def _rezip(source, target, rename=None, extra=()):
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            name = (rename or {}).get(info.filename, info.filename)
            dst.writestr(zipfile.ZipInfo(name), data)
        for name, data in extra:
            dst.writestr(zipfile.ZipInfo(name), data)
    return str(target)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_an_archive_with_a_duplicate_member_is_refused(tmp_path):
    forged = b'{"class_name": "Sequential", "config": {"layers": []}}'
    path = _rezip(ARCHIVE, tmp_path / "dup.keras", extra=[("config.json", forged)])
    with pytest.raises(ValueError, match="'config.json' is stored twice.*ambiguous") as info:
        models.load_model(path)
    assert path in str(info.value)
    with pytest.raises(ValueError, match="stored twice"):
        _mlp().load_weights(path)


def test_an_archive_with_a_nul_in_a_member_name_is_refused(tmp_path):
    # zipfile reads "config.json\0.txt" as "config.json"; a zip tool shows config.json\0.txt
    forged = b'{"class_name": "Sequential", "config": {"layers": []}}'
    placeholder = tmp_path / "placeholder.keras"
    _rezip(ARCHIVE, placeholder, extra=[("config.jsonX.txt", forged)])
    data = placeholder.read_bytes().replace(b"config.jsonX.txt", b"config.json\0.txt")
    path = str(tmp_path / "nul.keras")
    open(path, "wb").write(data)
    with zipfile.ZipFile(path) as z:                   # what zipfile alone would read
        assert [i.filename for i in z.infolist()].count("config.json") == 2
    with pytest.raises(ValueError, match=r"config.json\\x00.txt.*NUL byte") as info:
        models.load_model(path)
    assert path in str(info.value)


@pytest.mark.parametrize("alias", ["./config.json", "/config.json", ".\\config.json"])
def test_an_archive_with_two_spellings_of_a_member_is_refused(tmp_path, alias):
    path = _rezip(ARCHIVE, tmp_path / "alias.keras", extra=[(alias, b"{}")])
    with pytest.raises(ValueError, match="'config.json' is stored as.*ambiguous"):
        models.load_model(path)


def test_a_local_header_naming_another_member_is_refused(tmp_path):
    path = tmp_path / "local.keras"
    data = bytearray(open(ARCHIVE, "rb").read())
    at = data.index(b"model.weights.h5")                # the first occurrence: a local header
    data[at:at + 16] = b"model.weights.h6"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="local header of model.weights.h5 names") as info:
        models.load_model(str(path))
    assert str(path) in str(info.value)


# -- temporary files ----------------------------------------------------------------------------

def test_save_writes_no_named_temporary_but_its_own(tmp_path, monkeypatch):
    """The weights of a .keras go through an unnamed file; the archive through one exclusive
    name; so a link planted at any predictable name is never followed."""
    seen = []
    real = saving_api.write_archive

    def spy(path, *args):
        seen.append(sorted(os.listdir(tmp_path)))
        return real(path, *args)
    monkeypatch.setattr(saving_api, "write_archive", spy)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    model = _mlp()
    model.save(str(tmp_path / "m.keras"))
    assert len(seen) == 1 and seen[0][0].startswith(".m.keras.") and \
        seen[0][0].endswith(".tmp") and seen[0][1:] == ["victim"], seen
    assert sorted(os.listdir(tmp_path)) == ["m.keras", "victim"]
    # a link at the target itself is replaced, not followed
    os.symlink(victim, tmp_path / "link.keras")
    model.save(str(tmp_path / "link.keras"))
    assert victim.read_bytes() == b"keep" and not os.path.islink(tmp_path / "link.keras")
    assert models.load_model(str(tmp_path / "link.keras")).weights


# -- the command line ---------------------------------------------------------------------------

def _cli(*args, cwd=TESTS):
    env = dict(os.environ, PYTHONPATH=package_parent())
    return subprocess.run([sys.executable, "-m", "mixedcore", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def _one_line_error(result, *parts):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for part in parts:
        assert part in lines[0], (part, lines[0])


def test_cli_a_crashing_model_file_is_one_line_exit_2(tmp_path):
    path = _corrupt(tmp_path, CRASH_MODEL_CONFIG)
    np.save(tmp_path / "x.npy", np.zeros((2, 784), np.float32))
    result = _cli("predict", path, str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy"))
    _one_line_error(result, "error: load_model: ", path, "crashed libhdf5")
    result = _cli("report", path, str(tmp_path / "x.npy"))
    _one_line_error(result, "error: load_model: ", path)


def test_cli_outputs_that_cannot_be_written(tmp_path):
    from mixedcore.cli.main import main
    model = _mlp()
    model.save(str(tmp_path / "m.keras"))
    x = str(tmp_path / "x.npy")
    np.save(x, np.zeros((2, 5), np.float32))
    m = str(tmp_path / "m.keras")
    result = _cli("predict", m, x, "--out", "/proc/y.npy")
    _one_line_error(result, "error: --out", "/proc")
    result = _cli("report", m, x, "--json", x)
    _one_line_error(result, "error: --json", "is the input file")
    assert np.load(x).shape == (2, 5)
    assert main(["report", m, x, "--json", m]) == 2


@pytest.mark.parametrize("args, part", [
    (["bench", "--size", str(10 ** 12)], "--size: must be between 1 and 67108864"),
    (["bench", "--gemm", "100000"], "--gemm: must be between 1 and 4096"),
    (["bench", "--min-time", "1e9"], "--min-time: must be > 0 and at most 3600"),
    (["demo", "--hidden", str(10 ** 6)], "--hidden: must be between 1 and 4096"),
    (["demo", "--samples", str(10 ** 9)], "--samples: must be between 1 and 4000000"),
    (["demo", "--epochs", "x"], "--epochs: expected an integer, got 'x'"),
])
def test_cli_absurd_sizes_are_one_line_exit_2(args, part, capsys):
    from mixedcore.cli.main import main
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and part in err[0], err
