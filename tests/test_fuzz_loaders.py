"""Fuzzing the file loaders: random byte changes, truncations and zip member edits of valid small
files of each format, each loaded in a child interpreter; every outcome must be a model (or
weights) loaded, or a ValueError naming the file: no other exception type, no signal, no hang,
no MemoryError under the child's address-space limit.

The formats: a ``.keras`` archive with model.weights.h5 (written by Keras), the same with
Keras's model.weights.npz variant (made here when Keras is installed), a legacy ``.h5`` written
by tf.keras, a ``.weights.h5`` (Keras 3's layout), tf.keras's legacy weights ``.h5`` and a
``.npz`` of weights written by mixedcore.

Two profiles: **quick** (a fixed seed, a few mutations of each format; part of every run) and
**long** (marker ``fuzz``: many random ones):

    python -m pytest tests/test_fuzz_loaders.py -m fuzz
"""
import io
import json
import os
import random
import subprocess
import sys
import zipfile

import pytest

from isolated import DEFAULT_MEMORY, TESTS, package_parent

DATA = os.path.join(TESTS, "data", "tf_keras")
ARCHIVE = os.path.join(DATA, "mlp_float32.keras")

PROFILES = {"quick": (6, 20240601), "long": (150, None)}
PROFILE_PARAMS = [pytest.param("quick"), pytest.param("long", marks=pytest.mark.fuzz)]

# The child: loads each file of a list and prints one line per file, so that a crash or a hang
# is pinned to the file being read (the parent restarts it after that file).
_CHILD = r"""
import json, resource, sys
memory = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
from mixedcore import models
reference = models.load_model(sys.argv[3], compile=False)
def text(exc):
    return str(exc).replace("\n", " ")[:300].encode("utf-8", "replace").decode("utf-8")
for index, (how, path) in enumerate(json.load(open(sys.argv[1]))):
    print("start", index, flush=True)
    try:
        if how == "model":
            models.load_model(path)
        else:
            reference.load_weights(path)
        print("result", index, "ok", flush=True)
    except ValueError as exc:
        named = path in str(exc)
        print("result", index, "ValueError" if named else "unnamed-ValueError", text(exc),
              flush=True)
    except BaseException as exc:
        print("result", index, type(exc).__name__, text(exc), flush=True)
"""


def _mutate_bytes(data, rng):
    data = bytearray(data)
    if rng.random() < 0.15:
        return bytes(data[:rng.randrange(1, len(data))])
    for _ in range(rng.choice((1, 1, 1, 2, 4, 16))):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def _mutate_archive(path, rng):
    """A zip member edit: a member's bytes mutated (CRC kept right, so the inner parser sees
    them), removed, duplicated or renamed; else bytes of the archive itself."""
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    choice = rng.random()
    k = rng.randrange(len(members))
    name, data = members[k]
    if choice < 0.5 and data:
        members[k] = (name, _mutate_bytes(data, rng))
    elif choice < 0.6:
        del members[k]
    elif choice < 0.7:
        members.append((name, _mutate_bytes(data, rng) if data else data))
    elif choice < 0.8:
        members[k] = (rng.choice(["./" + name, name.upper(), name + "\\", "x/" + name]), data)
    else:
        return _mutate_bytes(open(path, "rb").read(), rng)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for member, content in members:
            info = zipfile.ZipInfo(member)
            info.compress_type = rng.choice((zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED))
            z.writestr(info, content)
    return out.getvalue()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """(name, how it is loaded, path) of the valid files mutated."""
    base = tmp_path_factory.mktemp("seeds")
    out = [("keras", "model", ARCHIVE),
           ("legacy_h5", "model", os.path.join(DATA, "mlp_float32.h5")),
           ("weights_h5", "weights", os.path.join(DATA, "mlp_float32.weights.h5")),
           ("legacy_weights_h5", "weights", os.path.join(DATA, "mlp_float32_ckpt.h5"))]
    from mixedcore import models
    model = models.load_model(ARCHIVE, compile=False)
    npz = str(base / "w.npz")
    model.save_weights(npz)
    out.append(("npz", "weights", npz))
    npz_archive = str(base / "npz.keras")
    made = subprocess.run(
        [sys.executable, "-c",
         "import sys, keras\n"
         "from keras.src.saving import saving_lib\n"
         "m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation='relu'),\n"
         "                      keras.layers.Dense(3)])\n"
         "saving_lib.save_model(m, sys.argv[1], weights_format='npz')\n",
         npz_archive],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "torch")))
    if made.returncode == 0:
        out.append(("keras_npz", "model", npz_archive))
    return out


def _run_children(listing, count):
    """{index: outcome} for the files of ``listing`` (a JSON file), restarting the child after
    a crash or a hang; a crashed or hung file's outcome is "signal ..." / "hang"."""
    outcomes = {}
    start = 0
    while start < count:
        with open(listing) as f:
            entries = json.load(f)[start:]
        part = listing + f".{start}"
        with open(part, "w") as f:
            json.dump(entries, f)
        env = dict(os.environ, PYTHONPATH=package_parent(), MIXEDCORE_NUM_THREADS="1")
        timed_out = False
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _CHILD, part, str(DEFAULT_MEMORY), ARCHIVE],
                capture_output=True, text=True, errors="replace", env=env, cwd=TESTS,
                timeout=90 + 15 * len(entries))
            stdout, code = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            code, timed_out = None, True
        last = None
        for line in stdout.splitlines():
            words = line.split(" ", 3)
            if words[0] == "start":
                last = start + int(words[1])
            elif words[0] == "result":
                outcomes[start + int(words[1])] = (words[2], words[3] if len(words) > 3 else "")
        if last is None:
            raise AssertionError(f"the child did not start: {stdout[-500:]}")
        if last not in outcomes:
            outcomes[last] = ("hang" if timed_out else f"exit {code}", stdout[-300:])
        start = last + 1
    return outcomes


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_mutated_files_load_or_are_refused_naming_the_file(profile, seeds, tmp_path):
    per_format, seed = PROFILES[profile]
    rng = random.Random(seed)
    entries = []
    for name, how, path in seeds:
        data = open(path, "rb").read()
        is_zip = data[:2] == b"PK"
        for k in range(per_format):
            mutated = _mutate_archive(path, rng) if is_zip and rng.random() < 0.6 else \
                _mutate_bytes(data, rng)
            target = tmp_path / f"{name}_{k}{os.path.splitext(path)[1]}"
            target.write_bytes(mutated)
            entries.append((how, str(target)))
    listing = str(tmp_path / "files.json")
    with open(listing, "w") as f:
        json.dump(entries, f)
    outcomes = _run_children(listing, len(entries))
    bad = {entries[i][1]: o for i, o in outcomes.items() if o[0] not in ("ok", "ValueError")}
    assert not bad, bad
    assert len(outcomes) == len(entries)
    # the mutations reached the parsers: most files are refused, not loaded untouched
    assert sum(o[0] == "ValueError" for o in outcomes.values()) >= len(entries) // 3
