"""The program store (issue 63): a new process whose config differs only in a number loads the
family's compiled programs instead of tracing them, and trains the numbers a fresh compile
trains; a stale entry (other code, another structure) or a damaged file is never used and the
line says why; the folder is bounded."""

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import preset, program_store, xla_cache
from rcmdp_jax.family import structure
from rcmdp_jax.study import runtime

SCRIPT = Path(__file__).resolve().parent / "program_store_script.py"


def run_script(store, out: Path, lr_scale: float, *env_name: str):
    env = {k: v for k, v in os.environ.items() if k != "RCMDP_JAX_PROGRAM_STORE"}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(store), str(out), str(lr_scale), *env_name], capture_output=True,
                          text=True, env=env, timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1]
    return json.loads(result[len("RESULT ") :]), proc.stdout


@pytest.mark.slow
def test_a_new_process_with_another_learning_rate_loads_the_program_and_trains_as_a_fresh_compile(tmp_path):
    store = tmp_path / "programs"
    first, log = run_script(store, tmp_path / "first.npz", 1.0)
    assert not first["loaded"] and first["built"] == 1 and first["counts"]["stored"] == 1
    assert "no stored program: none stored for it yet" in log
    again, log = run_script(store, tmp_path / "again.npz", 2.0)
    assert again["loaded"] and again["built"] == 0 and again["counts"]["loaded"] == 1, again
    assert re.search(r"family loaded compiled program \(\d+\.\d s\)", log), log
    fresh, _ = run_script("off", tmp_path / "fresh.npz", 2.0)  # no store: traced and compiled
    assert not fresh["loaded"] and fresh["built"] == 1 and fresh["note"] == ""
    a, f, o = (np.load(tmp_path / f"{n}.npz") for n in ("again", "fresh", "first"))
    assert sorted(a.files) == sorted(f.files)
    for name in a.files:
        np.testing.assert_array_equal(a[name], f[name], err_msg=name)
    assert any(not np.array_equal(a[n], o[n]) for n in a.files)  # the learning rate reached the program


@pytest.mark.slow
def test_a_new_process_with_another_box_width_cost_limit_and_noise_loads_the_program_and_trains_as_a_fresh_compile(
    tmp_path,
):
    """A ``gymnax:`` name's box widths (its ``kappa``), its costs' limits and budgets and its noise
    are arguments of the program: other ones load the program stored for the first and train the
    numbers a fresh compile trains."""
    store = tmp_path / "programs"
    name = "gymnax:CartPole-v1@uncertain=gravity:{},length:0.2@costs=x>{},x_dot:{}@noise={}"
    first, _ = run_script(store, tmp_path / "first.npz", 1.0, name.format(0.1, "0.3:5", 1.5, 1e-3))
    assert not first["loaded"] and first["counts"]["stored"] == 1
    again, log = run_script(store, tmp_path / "again.npz", 1.0, name.format("abs:3.5", "0.1:20", 0.5, 0.02))
    assert again["loaded"] and again["built"] == 0, log
    fresh, _ = run_script("off", tmp_path / "fresh.npz", 1.0, name.format("abs:3.5", "0.1:20", 0.5, 0.02))
    assert not fresh["loaded"] and fresh["built"] == 1
    a, f, o = (np.load(tmp_path / f"{n}.npz") for n in ("again", "fresh", "first"))
    for key in a.files:
        np.testing.assert_array_equal(a[key], f[key], err_msg=key)
    assert not np.array_equal(a["1/xi"], o["1/xi"])  # the robust member's kernels: in the wider box
    assert not np.array_equal(a["0/episode_ep_cost"], o["0/episode_ep_cost"])  # other limits: other costs


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("RCMDP_JAX_PROGRAM_STORE", raising=False)
    program_store.configure(tmp_path / "programs")
    yield tmp_path / "programs"
    program_store.configure(None)


def family_shape(**changes):
    return structure([preset("cartpole", a, **changes) for a in ("PPO", "PPO-Lag")])


class Tiny:
    """A small program that calls LAPACK (QR, as the orthogonal init does), and how often it was built."""

    def __init__(self):
        self.built = 0

    def __call__(self):
        self.built += 1
        return jax.jit(lambda x: jnp.linalg.qr(x)[0].sum() * 2).lower(jnp.ones((3, 3))).compile()


def get(build, shape=None, shapes="keys (3, 2)", objects=()):
    return program_store.load_or_build("vmap cartpole ppo", shape or family_shape(), shapes, build, objects)


def test_a_stored_program_is_loaded_without_building_it(store):
    build = Tiny()
    program, note, loaded = get(build)
    assert not loaded and note == "no stored program: none stored for it yet" and build.built == 1
    again, note, loaded = get(build)
    assert loaded and re.fullmatch(r"loaded compiled program \(\d+\.\d s\)", note) and build.built == 1
    x = jnp.arange(9.0).reshape(3, 3)
    assert float(again(x)) == float(program(x))


def test_changed_code_falls_back_to_compiling_and_says_so(store, monkeypatch):
    build = Tiny()
    get(build)
    monkeypatch.setattr(program_store, "package_code", lambda: "another version of the code")
    _, note, loaded = get(build)
    assert not loaded and build.built == 2 and note == "no stored program: the package's code changed"
    assert len(list(store.glob("*.program"))) == 2  # the stale entry is left to the bound, never used


def test_another_structure_falls_back_to_compiling_and_names_the_field(store):
    build = Tiny()
    get(build)
    _, note, loaded = get(build, family_shape(n_envs=8))
    assert not loaded and build.built == 2 and note == "no stored program: another structure (n_envs)"


@pytest.mark.parametrize("damage", ["payload", "header"])
def test_a_corrupted_file_is_said_removed_and_compiled_again(store, damage):
    build = Tiny()
    get(build)
    (path,) = store.glob("*.program")
    data = path.read_bytes()
    path.write_bytes(data[:-100] + bytes(100) if damage == "payload" else b"not json\n" + data)
    _, note, loaded = get(build)
    assert not loaded and build.built == 2
    assert note.startswith(f"the stored program {path.name} is damaged or cannot be loaded"), note
    assert note.endswith("removed")
    assert ("checksum" in note) == (damage == "payload")
    _, _, loaded = get(build)  # stored again when compiled
    assert loaded and build.built == 2


def test_a_damaged_file_that_cannot_be_removed_is_said_so(store, monkeypatch):
    build = Tiny()
    get(build)
    (path,) = store.glob("*.program")
    path.write_bytes(b"not json\n")

    def read_only(self, missing_ok=False):
        raise PermissionError(1, "Operation not permitted", str(self))

    monkeypatch.setattr(Path, "unlink", read_only)
    monkeypatch.setattr(program_store, "_write", lambda path, data: read_only(path))
    for _ in range(2):  # never used, though it stays
        _, note, loaded = get(build)
        assert not loaded and "; cannot be removed (Operation not permitted); not stored (" in note, note
    assert build.built == 3 and path.read_bytes() == b"not json\n"


def test_the_folder_keeps_the_most_recently_used_within_its_bounds(store, monkeypatch):
    build = Tiny()
    monkeypatch.setattr(program_store, "MAX_ENTRIES", 2)
    for i, shapes in enumerate(("a", "b", "c")):
        get(build, shapes=shapes)
        for j, path in enumerate(sorted(store.glob("*.program"), key=os.path.getmtime)):
            os.utime(path, (1000 + 10 * i + j, 1000 + 10 * i + j))  # a clock that always moves
    assert len(list(store.glob("*.program"))) == 2
    assert not get(build, shapes="a")[2] and get(build, shapes="c")[2]  # the oldest was dropped
    one = max(p.stat().st_size for p in store.glob("*.program"))
    monkeypatch.setattr(program_store, "MAX_BYTES", one + 1)
    get(build, shapes="d")
    assert [p.name for p in store.glob("*.program")] == [f"{program_store.key_of(_parts('d'))}.program"]


def test_a_write_that_never_finished_is_dropped_when_stale(store):
    """A process killed while writing leaves its temporary file (``atomic.write_bytes``): outside
    the bound, so dropped by the next write once it is an hour old; a write in progress is kept."""
    store.mkdir()
    old, new = store / f".{'1' * 40}.program.123.tmp", store / f".{'2' * 40}.program.456.tmp"
    for path in (old, new):
        path.write_bytes(bytes(1000))
    os.utime(old, (time.time() - 2 * 3600,) * 2)
    get(Tiny())
    assert not old.exists() and new.exists()


def _parts(shapes):
    return {"slot": "vmap cartpole ppo", "structure": program_store.describe(family_shape()), "shapes": shapes,
            **program_store.context()}  # fmt: skip


def test_compile_cache_off_keeps_nothing(store):
    """``--compile-cache off``: no program store, and JAX's XLA cache off too, also where
    ``JAX_COMPILATION_CACHE_DIR`` names a folder (as the tests' environment does)."""
    assert jax.config.jax_compilation_cache_dir and jax.config.jax_enable_compilation_cache
    try:
        runtime.speed_up("off")
        assert not jax.config.jax_enable_compilation_cache
        build = Tiny()
        assert get(build)[1:] == ("", False) and get(build)[1:] == ("", False) and build.built == 2
        assert not store.exists()
    finally:
        jax.config.update("jax_enable_compilation_cache", True)  # the rest of the session's tests use it


@pytest.mark.parametrize("spelled", ["off", "OFF", "Off"])
def test_compile_cache_off_in_any_case_is_off(spelled):
    """``--compile-cache OFF`` made a cache folder named ``OFF`` in the working directory."""
    from rcmdp_jax.study import cli

    assert cli.parser().parse_args(["--compile-cache", spelled]).compile_cache == "off"
    assert cli.parser().parse_args(["--compile-cache", "Offline"]).compile_cache == "Offline"  # a folder's name


def test_code_from_outside_the_package_is_not_stored(store):
    class MyRule:  # a plug-in defined here, not in rcmdp_jax: its code is not in the key
        pass

    build = Tiny()
    _, note, loaded = get(build, objects=[MyRule])
    assert not loaded and note.startswith("not stored: built with code from outside the package (")
    assert "MyRule of test_program_store" in note and not store.exists()


def test_a_remembered_check_runs_once_per_environment_and_code(store, monkeypatch):
    calls = []
    check = lambda: calls.append(1) or ["a warning"]  # noqa: E731
    assert program_store.remembered("cannot_bind", "cartpole", check) == ["a warning"]
    assert program_store.remembered("cannot_bind", "cartpole", check) == ["a warning"] and len(calls) == 1
    program_store.remembered("cannot_bind", "inventory", check)
    monkeypatch.setattr(program_store, "package_code", lambda: "another version of the code")
    program_store.remembered("cannot_bind", "cartpole", check)
    assert len(calls) == 3
    program_store.configure(None)
    program_store.remembered("cannot_bind", "cartpole", check)
    assert len(calls) == 4


def test_a_stored_call_promotes_a_python_number_as_jit_does(store):
    """A Python number is weakly typed under jit (``bfloat16 * 2.5`` stays bfloat16); the stored
    program is compiled, and loaded, for the same types."""
    f = jax.jit(lambda x, y: x * y)
    x = jnp.full(3, 1.3, jnp.bfloat16)
    want = np.asarray(x, np.float32) * np.float32(np.asarray(2.7, jnp.bfloat16))  # bfloat16 arithmetic, then
    want = np.asarray(want.astype(jnp.bfloat16))  # rounded to bfloat16: 3.5 where float32 gives 3.502
    for _ in range(2):
        stored = program_store.Stored(f, "sweep cartpole", {"policy_hidden": (3,)})
        out = stored(x, 2.7)
        assert out.dtype == jnp.bfloat16 and out.dtype == f(x, 2.7).dtype
        np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(want, np.float32))
        assert stored(x, jnp.float32(2.7)).dtype == jnp.float32  # a typed scalar: another program
    assert stored.loaded and len(list(store.glob("*.program"))) == 2


def test_a_stored_call_of_a_function_with_static_arguments_is_refused(store):
    f = lambda x, n: x * n  # noqa: E731
    for jitted in (jax.jit(f, static_argnums=1), jax.jit(f, static_argnames="n")):
        with pytest.raises(ValueError, match=r"^Stored: jitted has static arguments \(.*\); .*close over"):
            program_store.Stored(jitted, "sweep cartpole", {"policy_hidden": (3,)})
    closed = program_store.Stored(jax.jit(functools.partial(f, n=3)), "sweep cartpole", {"policy_hidden": (3,)})
    np.testing.assert_array_equal(closed(jnp.ones(2)), [3.0, 3.0])


@pytest.mark.parametrize("edit", [{"value": 5}, {"value": ["not the check's"], "sha256": "0" * 64}, None])
def test_a_remembered_value_that_was_edited_or_damaged_is_computed_again(store, edit):
    assert program_store.remembered("cannot_bind", "cartpole", lambda: ["a warning"]) == ["a warning"]
    (path,) = store.glob("*.json")
    path.write_text(json.dumps(edit) if edit else path.read_text()[:-5])
    assert program_store.remembered("cannot_bind", "cartpole", lambda: ["again"]) == ["again"]
    assert program_store.remembered("cannot_bind", "cartpole", lambda: ["a third"]) == ["again"]  # kept again


def test_a_stored_call_loads_its_program_per_shape_and_gives_the_same_numbers(store):
    f = lambda params, key: jnp.linalg.qr(params["w"])[0].sum(0) + jax.random.normal(key, (3,))  # noqa: E731
    args = ({"w": jnp.arange(9.0).reshape(3, 3)}, jax.random.PRNGKey(0))
    first = program_store.Stored(jax.jit(f), "sweep cartpole", {"policy_hidden": (3,)})
    out = first(*args)
    assert not first.loaded and len(list(store.glob("*.program"))) == 1
    again = program_store.Stored(jax.jit(f), "sweep cartpole", {"policy_hidden": (3,)})
    np.testing.assert_array_equal(again(*args), out)
    assert again.loaded
    np.testing.assert_array_equal(again(*args), jax.jit(f)(*args))
    again({"w": jnp.ones((3, 3))}, jax.random.PRNGKey(1))  # the same shapes: the same program
    assert len(list(store.glob("*.program"))) == 1
    other = program_store.Stored(jax.jit(f), "sweep cartpole", {"policy_hidden": (4,)})  # another policy
    other(*args)
    assert not other.loaded and len(list(store.glob("*.program"))) == 2


CACHE_HIT = """
import sys, jax, jax.numpy as jnp
from rcmdp_jax import program_store
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
program_store.configure(sys.argv[2] if sys.argv[2] != "off" else None)
f = lambda x, y: (jnp.tanh(jnp.concatenate([jnp.sin(x), jnp.cos(y)])).sum(), jnp.linalg.qr(jnp.outer(x, y))[0])
args = (jnp.linspace(0.0, 1.0, 64), jnp.linspace(1.0, 2.0, 64))
build = lambda: jax.jit(f).lower(*args).compile()
program, note, loaded = program_store.load_or_build("slot", {"what": "f"}, "shapes", build)
same = all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(program(*args)), jax.tree.leaves(jax.jit(f)(*args))))
print("RESULT", loaded, same, program_store.counts["stored"])
"""


@pytest.mark.slow
def test_a_program_read_from_the_persistent_cache_is_stored_whole(tmp_path):
    """An executable JAX read from its persistent cache serializes without its object code
    (jaxlib 0.10.2): the store keeps the bytes the cache read, so a third process can run it."""
    env = {k: v for k, v in os.environ.items() if k != "RCMDP_JAX_PROGRAM_STORE"}

    def run(store):
        proc = subprocess.run([sys.executable, "-c", CACHE_HIT, str(tmp_path / "xla"), store], capture_output=True,
                              text=True, env=env, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [line for line in proc.stdout.splitlines() if line.startswith("RESULT")][-1].split()[1:]

    assert run("off") == ["False", "True", "0"]  # compiled, into JAX's cache only
    assert run(str(tmp_path / "programs")) == ["False", "True", "1"]  # read from JAX's cache, stored
    assert run(str(tmp_path / "programs")) == ["True", "True", "0"]  # loaded, runs, the same numbers


@pytest.mark.slow
def test_the_runner_loads_its_training_test_and_search_programs_and_writes_what_a_fresh_compile_writes(tmp_path):
    """Three runs of the command (2 CPU devices): the first stores the programs, the second (another
    learning rate) loads them, the third (the same learning rate, ``--compile-cache off``) compiles;
    the second's and the third's training metrics, test results and worst cases are the same."""
    env = {k: v for k, v in os.environ.items() if k != "RCMDP_JAX_PROGRAM_STORE"}
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    command = [sys.executable, "-m", "rcmdp_jax", "--env", "cartpole", "--algos", "PPO-Lag", "--seeds", "2",
               "--steps", "128", "--set", "n_steps=16", "--set", "minibatch_size=16", "--n-test", "2",
               "--plots", "off", "--worst-case", "all", "--devices", "2"]  # fmt: skip

    def run(name, *more):
        proc = subprocess.run([*command, "--out", str(tmp_path / name), *more], capture_output=True, text=True,
                              env=env, timeout=1200)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc.stdout

    cache = ["--compile-cache", str(tmp_path / "cache")]
    assert "no stored program: none stored for it yet" in run("first", *cache)
    log = run("again", *cache, "--set", "lr=0.001")
    assert re.search(r"PPO-Lag: loaded compiled program \(\d+\.\d s\)", log), log
    run("fresh", "--compile-cache", "off", "--set", "lr=0.001")
    stored = sorted(p.name for p in (tmp_path / "cache" / program_store.SUBFOLDER).iterdir())
    assert len([p for p in stored if p.endswith(".program")]) == 4, stored  # training, test, search, cost check
    for name in ("train_metrics.npz", "test_results.npz", "worst_case.npz"):
        a, f = (np.load(tmp_path / run_ / "cartpole" / "PPO-Lag" / name) for run_ in ("again", "fresh"))
        assert sorted(a.files) == sorted(f.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], f[key], err_msg=f"{name} {key}")


@pytest.mark.slow
def test_the_runner_at_another_limit_loads_its_training_and_test_programs_and_writes_what_a_fresh_compile_writes(
    tmp_path,
):
    """A study domain's limit is an argument of the training program, of the robustness test's (its
    kernels) and of the cannot-bind check's: a second run at another limit stores nothing new and writes
    what a fresh compile writes."""
    env = {k: v for k, v in os.environ.items() if k != "RCMDP_JAX_PROGRAM_STORE"}
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    command = [sys.executable, "-m", "rcmdp_jax", "--algos", "PPO-Lag", "--seeds", "2", "--steps", "128", "--set",
               "n_steps=16", "--set", "minibatch_size=16", "--n-test", "2", "--plots", "off", "--devices", "2"]  # fmt: skip

    def run(name, limit, *more):
        proc = subprocess.run([*command, "--env", f"cartpole@velocity_limit={limit}", "--out", str(tmp_path / name),
                               *more], capture_output=True, text=True, env=env, timeout=1200)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc.stdout

    cache = ["--compile-cache", str(tmp_path / "cache")]
    run("first", 0.3, *cache)
    stored = lambda: sorted(p.name for p in (tmp_path / "cache" / program_store.SUBFOLDER).glob("*.program"))  # noqa: E731
    before = stored()
    assert len(before) == 3, before  # training, test, the cannot-bind check's episodes
    log = run("again", 0.05, *cache)
    assert re.search(r"PPO-Lag: loaded compiled program \(\d+\.\d s\)", log), log
    assert stored() == before  # the test's program and the check's loaded too: nothing new stored
    run("fresh", 0.05, "--compile-cache", "off")
    folder = lambda run_: next((tmp_path / run_).glob("cartpole*/PPO-Lag"))  # noqa: E731
    for name in ("train_metrics.npz", "test_results.npz"):
        a, f = np.load(folder("again") / name), np.load(folder("fresh") / name)
        assert sorted(a.files) == sorted(f.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], f[key], err_msg=f"{name} {key}")


def test_a_folder_that_cannot_be_written_compiles_and_says_it_stored_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("RCMDP_JAX_PROGRAM_STORE", raising=False)
    (tmp_path / "a_file").write_text("")
    program_store.configure(tmp_path / "a_file" / "programs")
    try:
        build = Tiny()
        program, note, loaded = get(build)
    finally:
        program_store.configure(None)
    assert not loaded and build.built == 1 and float(program(jnp.eye(3))) == float(build()(jnp.eye(3)))
    assert note.startswith("no stored program: none stored for it yet; not stored (") and "Error" in note, note


@pytest.mark.parametrize("where", ["the key", "another entry", "a remembered value"])
def test_a_fifo_in_the_folder_is_never_read(store, where):
    """A FIFO where a file should be blocks a plain ``open`` until something writes it: the store
    reads only regular files (a watchdog writes the FIFO after 20 s, so that a hang fails)."""
    import threading

    build = Tiny()
    get(build, shapes="stored")
    name = {"the key": f"{program_store.key_of(_parts('a'))}.program", "another entry": f"{'0' * 40}.program",
            "a remembered value": f"{program_store.key_of({'what': 'w', 'name': 'n', **program_store.context()})}.json"}  # fmt: skip
    os.mkfifo(store / name[where])
    fired = []

    def unblock():
        fired.append(1)
        with open(store / name[where], "wb") as f:  # blocks until a reader opens it
            f.write(b"x\n")

    watchdog = threading.Timer(20, unblock)
    watchdog.daemon = True
    watchdog.start()
    try:
        if where == "a remembered value":
            assert program_store.remembered("w", "n", lambda: [1]) == [1]
        else:
            _, note, loaded = get(build, shapes="a")
            assert not loaded and note.startswith("no stored program: "), note
    finally:
        watchdog.cancel()
    assert not fired, "the store blocked on a FIFO"


def test_a_folder_where_a_program_should_be_is_a_miss(store):
    """A folder under a program's name is not a damaged program: a miss, said as one (it was
    counted damaged, with the error of opening a folder and a file descriptor's number), and
    the program compiled as for any miss."""
    build = Tiny()
    get(build, shapes="stored")
    (store / f"{program_store.key_of(_parts('a'))}.program").mkdir()
    before = dict(program_store.counts)
    _, note, loaded = get(build, shapes="a")
    assert not loaded and note.startswith("no stored program: ") and "damaged" not in note, note
    assert (
        program_store.counts["damaged"] == before["damaged"] and program_store.counts["missed"] == before["missed"] + 1
    )


def test_a_damaged_header_of_another_entry_is_passed_over_when_saying_why(store):
    build = Tiny()
    get(build, shapes="a")
    (path,) = store.glob("*.program")
    payload = path.read_bytes().split(b"\n", 1)[1]
    for i, head in enumerate(([3], {"parts": 3}, {"parts": {"slot": "vmap cartpole ppo", "structure": 3}})):
        (store / f"{i}{path.name[1:]}").write_bytes(json.dumps(head).encode() + b"\n" + payload)
    path.unlink()
    _, note, loaded = get(build, shapes="a")
    assert not loaded and build.built == 2 and note == "no stored program: none stored for it yet"


def test_a_damaged_stored_call_is_said(store, capsys):
    f = jax.jit(lambda x: x * 2)
    program_store.Stored(f, "sweep cartpole", {"policy_hidden": (3,)})(jnp.ones(3))
    (path,) = store.glob("*.program")
    path.write_bytes(path.read_bytes()[:-10])
    again = program_store.Stored(f, "sweep cartpole", {"policy_hidden": (3,)})
    np.testing.assert_array_equal(again(jnp.ones(3)), np.full(3, 2.0))
    err = capsys.readouterr().err
    assert f"rcmdp_jax: note: sweep cartpole: the stored program {path.name} is damaged" in err, err
    assert not again.loaded and "checksum" in again.note


def test_another_prng_implementation_falls_back_to_compiling(store):
    """rbg and unsafe_rbg keys have the same shape but draw other numbers: a program traced under
    one is never run under the other."""
    build = Tiny()
    jax.config.update("jax_default_prng_impl", "rbg")
    try:
        get(build)
        jax.config.update("jax_default_prng_impl", "unsafe_rbg")
        _, note, loaded = get(build)
    finally:
        jax.config.update("jax_default_prng_impl", "threefry2x32")
    assert not loaded and build.built == 2 and note == "no stored program: other JAX settings"


def test_a_cpu_with_other_instruction_sets_falls_back_to_compiling(store, monkeypatch, tmp_path):
    """XLA compiles for the host's instruction sets: a folder shared by two machines (a home on a
    network disk) never gives one the other's program."""
    build = Tiny()
    cpuinfo = "processor\t: 0\nmodel name\t: A CPU\nflags\t\t: fpu sse2 {}\n\nprocessor\t: 1\n"
    monkeypatch.setattr(program_store, "CPUINFO", tmp_path / "cpuinfo")
    try:
        for flags, loads in (("avx2 avx512f", False), ("avx2 avx512f", True), ("avx2", False)):
            (tmp_path / "cpuinfo").write_text(cpuinfo.format(flags))
            program_store.cpu.cache_clear()
            _, note, loaded = get(build)
            assert loaded == loads, note
        assert note == "no stored program: another CPU" and " A CPU flags " in program_store.cpu()
    finally:
        program_store.cpu.cache_clear()  # read again from the real file after the test


def test_the_cannot_bind_check_at_another_limit_loads_its_program(store, monkeypatch):
    """The check's episodes are stored under the environment's name with its numbers blanked: at
    another limit (a rerun that changes only the limit) the program is loaded, not compiled, and
    gives what a fresh compile gives there; another environment is a program of its own."""
    from rcmdp_jax import cost_check

    built = []
    original = jax.stages.Lowered.compile
    monkeypatch.setattr(jax.stages.Lowered, "compile", lambda self, *a, **k: built.append(1) or original(self, *a, **k))
    cost_check.step_costs("cartpole@velocity_limit=0.2", episodes=2)
    programs = sorted(store.glob(f"*{program_store.SUFFIX}"))
    stored = cost_check.step_costs("cartpole@velocity_limit=1.5", episodes=2)
    assert len(built) == 1 and sorted(store.glob(f"*{program_store.SUFFIX}")) == programs and len(programs) == 1
    program_store.configure(None)  # a fresh compile, nothing stored or loaded
    fresh = cost_check.step_costs("cartpole@velocity_limit=1.5", episodes=2)
    np.testing.assert_array_equal(stored, fresh)
    program_store.configure(store)
    cost_check.step_costs("inventory", episodes=2)
    assert len(built) == 2 and len(list(store.glob(f"*{program_store.SUFFIX}"))) == 2  # (jit's own path above)


def test_jaxs_xla_cache_beside_the_store_is_bounded_least_recently_used_first(tmp_path, monkeypatch):
    """JAX's XLA cache (its ``*-cache`` files) over the bound loses its least recently used entries
    (read or written last) down to three quarters of the bound; under it, nothing; the program
    store's subfolder and other files are never touched; the runner's start (``speed_up``) bounds
    the folder it uses (unless JAX bounds it itself: ``jax_compilation_cache_max_size``)."""

    def entry(name, when, size=100):
        path = tmp_path / f"{name}-cache"
        path.write_bytes(b"x" * size)
        os.utime(path, (when, when))
        return path

    old = [entry(f"k{i}", 1_000_000 + 1000 * i) for i in range(6)]
    (tmp_path / "k0-atime").write_bytes(b"t")  # JAX's own LRU's companion file
    (tmp_path / program_store.SUBFOLDER).mkdir()
    kept = [tmp_path / program_store.SUBFOLDER / f"a{program_store.SUFFIX}", tmp_path / "notes.txt"]
    for path in kept:
        path.write_bytes(b"y" * 1000)
    assert xla_cache.evict(tmp_path, max_bytes=600) == []  # 600 bytes of entries: at the bound
    entry("k6", 1_000_000 + 6000)
    os.utime(old[1], (1_000_000 + 9000, old[1].stat().st_mtime))  # k1 read since: recently used
    dropped = xla_cache.evict(tmp_path, max_bytes=600)  # 700 > 600: down to 450 at most
    assert dropped == [old[0], old[2], old[3]]
    assert sorted(p.name for p in tmp_path.glob("*-cache")) == ["k1-cache", "k4-cache", "k5-cache", "k6-cache"]
    assert not (tmp_path / "k0-atime").exists() and all(p.exists() for p in kept)

    calls = []
    monkeypatch.setattr(xla_cache, "evict", lambda cache, max_bytes=None: calls.append(Path(cache)))
    try:
        runtime.speed_up("off")  # no cache: nothing bounded
        runtime.speed_up(None)  # the tests' cache folder (JAX_COMPILATION_CACHE_DIR), bounded
        assert calls == [Path(jax.config.jax_compilation_cache_dir)]
    finally:
        program_store.configure(None)
