"""`kcage bench --abi tvm-ffi`: modules that TVM builds for `llvm` and exports, timed and
verified by the real `kcage` program in its sandboxed workers.  The modules are compiled
once per test run, with the TVM of this venv; without TVM or without the kcage program
the tests are skipped with the reason."""

import json
import os
import subprocess

import pytest

N = 64  # matmul: f32[N,N] x f32[N,N]
EW = (64, 128)  # elementwise: f32[64,128] twice -> one output
MM_ARGS = "f32[%d,%d] f32[%d,%d] f32[%d,%d]:out" % ((N,) * 6)
EW_ARGS = "f32[%d,%d] f32[%d,%d] f32[%d,%d]:out" % (EW * 3)


def _kcage():
    lib = os.environ.get("KCAGE_LIB")
    exe = os.environ.get("KCAGE_BIN") or (
        os.path.join(os.path.dirname(lib), "kcage") if lib else None
    )
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("no kcage program (set KCAGE_BIN, or KCAGE_LIB next to it)")
    return exe


def _matmuls(te):
    a = te.placeholder((N, N), "float32", name="A")
    b = te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), name="k")
    honest = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    # Wrong by one term of each sum: close to right, never within the tolerance.
    k1 = te.reduce_axis((0, N - 1), name="k")
    wrong = te.compute((N, N), lambda i, j: te.sum(a[i, k1] * b[k1, j], axis=k1), name="C")
    return [a, b, honest], [a, b, wrong]


def _elementwise(te, tvm):
    a = te.placeholder(EW, "float32", name="A")
    b = te.placeholder(EW, "float32", name="B")
    honest = te.compute(EW, lambda i, j: a[i, j] * b[i, j] + a[i, j], name="C")
    last = (EW[0] - 1, EW[1] - 1)
    # Wrong in its last element only.
    wrong = te.compute(
        EW,
        lambda i, j: tvm.tirx.if_then_else(
            tvm.tirx.all(i == last[0], j == last[1]), a[i, j], a[i, j] * b[i, j] + a[i, j]
        ),
        name="C",
    )
    return [a, b, honest], [a, b, wrong]


def _two_stages(te):
    """The honest elementwise op through an intermediate tensor: TVM allocates it with
    TVMBackendAllocWorkspace (too large for the stack)."""
    a = te.placeholder(EW, "float32", name="A")
    b = te.placeholder(EW, "float32", name="B")
    d = te.compute(EW, lambda i, j: a[i, j] * b[i, j], name="D")
    return [a, b, te.compute(EW, lambda i, j: d[i, j] + a[i, j], name="C")]


def _calls_packed(te, tvm):
    """A module that calls another packed function (TVM's runtime would find it)."""
    a = te.placeholder((64,), "float32", name="A")
    c = te.extern(
        (64,), [a], lambda ins, outs: tvm.tirx.call_packed("my.fill", ins[0], outs[0]),
        name="C", dtype="float32",
    )
    return [a, c]


def _build(tvm, func, name, path, schedule=None):
    mod = func.with_attr("global_symbol", name)
    if schedule:
        sch = tvm.s_tir.Schedule(mod)
        schedule(sch)
        mod = sch.mod
    tvm.tirx.build(mod, target="llvm").export_library(path)
    return path


def _tile(sch):
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    jo, ji = sch.split(j, factors=[None, 16])
    sch.reorder(i, jo, ji)


def _parallel(sch):
    i, j = sch.get_loops(sch.get_sblock("C"))
    sch.parallel(i)
    sch.vectorize(sch.split(j, factors=[None, 8])[1])


@pytest.fixture(scope="session")
def modules(tmp_path_factory):
    """{name: path} of every module, built once."""
    try:
        import tvm  # pylint: disable=import-outside-toplevel
        import tvm.s_tir  # pylint: disable=import-outside-toplevel,unused-import
        from tvm import te  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        pytest.skip("tvm is not importable here (%s): no TVM-built module" % e)
    d = tmp_path_factory.mktemp("tvmffi")
    mm, mm_wrong = _matmuls(te)
    ew, ew_wrong = _elementwise(te, tvm)
    out = {}
    for key, args, name, sched in [
        ("mm_ref", mm, "matmul", None),
        ("mm", mm, "matmul", _tile),
        ("mm_wrong", mm_wrong, "matmul", _tile),
        ("ew_ref", ew, "ew", None),
        ("ew", ew, "ew", _parallel),
        ("ew_wrong", ew_wrong, "ew", None),
    ]:
        out[key] = _build(tvm, te.create_prim_func(args), name, str(d / (key + ".so")), sched)
    out["ew_ws"] = _build(tvm, te.create_prim_func(_two_stages(te)), "ew", str(d / "ew_ws.so"))
    out["packed"] = _build(
        tvm, te.create_prim_func(_calls_packed(te, tvm)), "packed", str(d / "packed.so")
    )
    return out


def bench(tmp_path, *args):
    """Run `kcage bench --json`; (exit status, stderr, {kernel basename: record})."""
    out = tmp_path / "r.jsonl"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    p = subprocess.run(
        [_kcage(), "bench", "--quiet", "--repeat", "2", "--min-repeat-ms", "2",
         "--json", str(out)] + list(args),
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    recs = {}
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            recs[os.path.basename(r["kernel"])] = r
    return p.returncode, p.stderr, recs


def _sandbox_or_skip(rc, err, recs):
    if rc == 3:
        pytest.skip("kcage cannot run a batch on this host: %s" % err.strip())
    assert rc == 0, err
    return recs


@pytest.mark.parametrize(
    "prefix,entry,args", [("mm", "matmul", MM_ARGS), ("ew", "ew", EW_ARGS)]
)
def test_honest_ok_and_wrong_detected(modules, tmp_path, prefix, entry, args):
    rc, err, recs = bench(
        tmp_path, "--abi", "tvm-ffi", "--entry", entry, "--args", args,
        "--reference", modules[prefix + "_ref"], modules[prefix], modules[prefix + "_wrong"],
    )
    recs = _sandbox_or_skip(rc, err, recs)
    ok, wrong = recs[prefix + ".so"], recs[prefix + "_wrong.so"]
    assert ok["status"] == "ok", ok
    assert ok["abi"] == "tvm-ffi" and ok["isolation"] == "sandbox"
    assert ok["median_s"] > 0 and ok["checked_calls"]["verified"] > 0
    assert ok["max_abs_err"] <= 1e-3
    assert wrong["status"] == "wrong_result", wrong
    assert wrong["abi"] == "tvm-ffi"


def test_parallel_module_runs_serially(modules):
    """The parallel elementwise module asks its loader for a parallel launcher (the
    worker serves a serial one): the honest test above ran through it."""
    with open(modules["ew"], "rb") as f:
        assert b"__TVMBackendParallelLaunch" in f.read()


def test_workspace_module(modules, tmp_path):
    """A module that asks its loader for workspace memory gets it (malloc) and is ok."""
    with open(modules["ew_ws"], "rb") as f:
        assert b"__TVMBackendAllocWorkspace" in f.read()
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--abi", "tvm-ffi", "--entry", "ew", "--args", EW_ARGS,
        "--reference", modules["ew_ref"], modules["ew_ws"],
    ))
    assert recs["ew_ws.so"]["status"] == "ok", recs


def test_module_needing_the_runtime_is_refused(modules, tmp_path):
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--abi", "tvm-ffi", "--entry", "packed", "--args", "f32[64] f32[64]:out",
        modules["packed"],
    ))
    r = recs["packed.so"]
    assert r["status"] == "error" and "__TVMFFIFunctionCall" in r["message"], r


def test_default_entry_is_main(modules, tmp_path):
    """TVM's module entry point (__tvm_ffi_main) is the default --entry."""
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--abi", "tvm-ffi", "--args", EW_ARGS, "--reference", modules["ew_ref"],
        modules["ew"],
    ))
    assert recs["ew.so"]["status"] == "ok", recs


def test_bad_entry(modules, tmp_path):
    """A candidate without the function: a record that names it; the reference without
    it: one line, exit 2."""
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--abi", "tvm-ffi", "--entry", "nope", "--args", MM_ARGS, modules["mm"],
    ))
    r = recs["mm.so"]
    assert r["status"] == "error"
    assert "no TVM-FFI function 'nope'" in r["message"] and "__tvm_ffi_nope" in r["message"]
    rc, err, _ = bench(
        tmp_path, "--abi", "tvm-ffi", "--entry", "nope", "--args", MM_ARGS,
        "--reference", modules["mm_ref"], modules["mm"],
    )
    if rc == 3:
        pytest.skip("kcage cannot run a batch on this host: %s" % err.strip())
    assert rc == 2, err
    lines = [l for l in err.splitlines() if l and not l.startswith("==")]
    assert len(lines) == 1 and "no TVM-FFI function 'nope'" in lines[0], err


def test_module_error_text_reaches_the_record(modules, tmp_path):
    """TVM's own argument check refuses tensors of another shape: the error it raises
    through TVMFFIErrorSetRaisedFromCStrParts (served by the worker) is the message."""
    small = "f32[32,32] f32[32,32] f32[32,32]:out"
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--abi", "tvm-ffi", "--entry", "matmul", "--args", small, modules["mm"],
    ))
    r = recs["mm.so"]
    assert r["status"] == "error", r
    assert "returned -1: ValueError" in r["message"] and "shape" in r["message"], r["message"]


def test_dlpack_abi_refuses_a_tvm_module(modules, tmp_path):
    """Without --abi the module is called as a DLPack kernel: it has no such symbol."""
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--entry", "matmul", "--args", MM_ARGS, modules["mm"],
    ))
    assert recs["mm.so"]["status"] == "error" and recs["mm.so"]["abi"] == "dlpack"


def test_input_writer_is_caught(tmp_path):
    """A hand-written TVM-FFI kernel (built from source by kcage) that uses an input as
    scratch: the read-only input mapping names it, as for a DLPack kernel."""
    src = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "measure", "tvmffi")
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--abi", "tvm-ffi", "--entry", "add", "--args",
        "f32[1000] f32[1000] f32[1000]:out", "--reference", os.path.join(src, "add.c"),
        os.path.join(src, "add_input_write.c"),
    ))
    r = recs["add_input_write.c"]
    assert r["status"] == "suspicious" and "read-only input" in r["message"], r


def test_no_isolation(modules, tmp_path):
    """The plain process (kcage itself, forked) serves the error setter too."""
    recs = _sandbox_or_skip(*bench(
        tmp_path, "--no-isolation", "--abi", "tvm-ffi", "--entry", "matmul", "--args", MM_ARGS,
        "--reference", modules["mm_ref"], modules["mm"], modules["mm_wrong"],
    ))
    assert recs["mm.so"]["status"] == "ok" and recs["mm.so"]["isolation"] == "none"
    assert recs["mm_wrong.so"]["status"] == "wrong_result"
