"""The FP8 GEMM's compiled launch path (runtime/native/fast_gemm.cpp, runtime/fast_launch.py)
on the CPU: built by fast_launch's own background build, with a ctypes callback standing in
for cuLaunchKernelEx and CPU tensors as operands (out given: allocating needs a GPU; tests/gpu/
test_fast_launch.py covers that). Skipped where torch's C++ toolchain is missing; the first
build takes ~50 s on two cores."""
import ctypes
import shutil
import sysconfig
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kdsl.errors import KdslError  # noqa: E402
from kdsl.runtime import driver, fast_launch, gemm_launch, tma  # noqa: E402
from fp8_signature import fp8_slots  # noqa: E402

M, N, K = 64, 96, 256
POINTER_PARAMS = fp8_slots("sa", "sb", "out", "group", "count")  # the kernel's per-call pointers
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@pytest.fixture(scope="module")
def ext():
    python_h = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("ninja") is None or shutil.which("c++") is None or not python_h.exists():
        pytest.skip("no C++ toolchain for torch extensions (ninja, c++ and Python's headers)")
    fast_launch.start()
    assert fast_launch.wait(), "the compiled launch path did not build (see the warning)"
    return fast_launch.module()


class FakePlan:
    """What fast_launch.register reads from a Plan: the real ArgPack and Launcher of the FP8
    GEMM's parameter layout, tensor maps with a stand-in encoder, a stream getter."""

    def __init__(self, stream=77, sk=0):
        self.pack = gemm_launch._arg_pack(M, N, K, 1, 8, sk)
        self.sk_tiles, self.dynamic = sk, False
        self._launch = driver.Launcher(0x1234, (132, 1, 1), (384, 1, 1), 1000)
        self.loaded = type("Loaded", (), {"fn_ptr": 0x5678})()
        self.device, self.sa_align, self.sb_align, self.out_align = -1, 16, 16, 16
        self.stream = stream
        self.current_stream = lambda: self.stream
        self.encodes = []
        operands = ("a", "b", "out", "a_scale", "b_scale")
        self.maps = [FakeMap(self, gemm_launch.map_slot(n)) for n in operands]
        self.map_sources = gemm_launch.map_sources(operands)

    def param(self, slot):
        return ctypes.c_uint64.from_address(self.pack.params[slot]).value


class FakeMap(tma.TensorMap):
    def __init__(self, plan, index):
        self.plan, self.params, self.index = plan, plan.pack.params, index
        self.encoded, self.on_drop, self.ptr = {}, [], None
        self.encode = lambda buf, *args: plan.encodes.append((index, args[2])) or 0
        self.dtype = self.rank = self.swizzle = self.l2_promotion = 0
        self.dims = self.strides = self.box = self.elem_strides = None


def operands(contiguous=False):
    a = torch.randint(-8, 8, (M, K), dtype=torch.int8).view(torch.float8_e4m3fn)
    b = torch.randint(-8, 8, (N, K), dtype=torch.int8).view(torch.float8_e4m3fn)
    sa = torch.rand(K // 128, M).t()
    sb = torch.rand(1, K // 128)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    group = torch.zeros(M, dtype=torch.int32) if contiguous else None
    return a, sa, b, sb, group, out


def failed(status):  # driver._check without a driver to name the error
    raise KdslError(f"kernel launch failed: CUDA error {status}")


def fast_with(ext, plan, tensors, launched, status=0, extra_name=None):
    def launch(cfg, fn, params, extra):
        launched.append((cfg, fn, params, plan.pack.lock.locked()))
        return status

    plan.fake = LAUNCH(launch)  # kept alive with the plan
    fast = ext.FastGemm(ctypes.cast(plan.fake, ctypes.c_void_p).value, failed)
    entry = fast_launch.register(fast, ext, plan, extra_name, tensors, out_given=True)
    return fast, entry


def test_a_registered_call_launches_with_its_pointers_stream_and_maps(ext):
    plan, launched = FakePlan(), []
    a, sa, b, sb, _, out = tensors = operands()
    fast, _ = fast_with(ext, plan, tensors, launched)
    assert fast(a, sa, b, sb, None, out) is out
    plan.stream = 78
    assert fast(a, sa, b, sb, None, out) is out
    assert len(plan.encodes) == 5, "maps already bound: a second call encodes nothing"
    assert [(cfg, fn, params, locked) for cfg, fn, params, locked in launched] == \
        [(plan._launch._address, 0x5678, plan.pack.params_address, True)] * 2
    assert plan._launch.config.stream == 78
    assert [plan.param(i) for i in POINTER_PARAMS] == [sa.data_ptr(), sb.data_ptr(), out.data_ptr(), 0, 0]
    ptr = {"a": a.data_ptr(), "b": b.data_ptr(), "out": out.data_ptr(), "a_scale": sa.data_ptr(), "b_scale": sb.data_ptr()}
    assert sorted(plan.encodes) == sorted((gemm_launch.map_slot(n), p) for n, p in ptr.items())
    for m, name in zip(plan.maps, ("a", "b", "out", "a_scale", "b_scale")):
        assert plan.pack.params[m.index] == m.encoded[ptr[name]][1]


def test_other_calls_are_declined_and_nothing_launches(ext):
    plan, launched = FakePlan(), []
    a, sa, b, sb, _, out = tensors = operands()
    fast, _ = fast_with(ext, plan, tensors, launched)
    declined = [
        (a[:-1], sa[:-1], b, sb, None, torch.empty(M - 1, N, dtype=torch.bfloat16)),  # another shape
        (a, sa, b, sb, None, out.float()),                                              # out's dtype
        (a, sa, b, sb, None, None),                                                     # allocating: not this entry
        (a, sa, b, sb, torch.zeros(M, dtype=torch.int32), out),                         # an extra argument
        (a, sa, list(b.shape), sb, None, out),                                             # not a tensor
        (a, sa, b, sb, object(), out),                                                  # extra by a wrong name
        (a, sa, b, sb, None, torch.empty(M * N + 4, dtype=torch.bfloat16)[4:].view(M, N)),  # out 8 B off
        (a, torch.rand(K // 128 * M + 1)[1:].view(K // 128, M).t(), b, sb, None, out),  # a_scale misaligned
        (a, sa, b, torch.rand(sb.numel() + 1)[1:].view(sb.shape), None, out),           # b_scale misaligned
    ]
    for call in declined:
        assert fast(*call) is None
    assert launched == [] and plan.encodes == []


def test_a_driver_error_raises_kdsl_error_and_frees_the_lock(ext):
    plan, launched = FakePlan(), []
    a, sa, b, sb, _, out = tensors = operands()
    fast, _ = fast_with(ext, plan, tensors, launched, status=700)
    with pytest.raises(KdslError, match="CUDA error 700"):
        fast(a, sa, b, sb, None, out)
    assert not plan.pack.lock.locked()


def test_the_grouped_kinds_extra_pointer_reaches_its_slot(ext):
    plan, launched = FakePlan(), []
    a, sa, b, sb, group, out = tensors = operands(contiguous=True)
    fast, _ = fast_with(ext, plan, tensors, launched, extra_name="group")
    assert fast(a, sa, b, sb, None, out) is None  # the entry wants its group
    assert fast(a, sa, b, sb, group, out) is out
    assert [plan.param(i) for i in POINTER_PARAMS] == [sa.data_ptr(), sb.data_ptr(), out.data_ptr(), group.data_ptr(), 0]


def test_python_and_cpp_bind_through_one_record(ext):
    """After adoption the Python path binds the maps with the FastGemm's `bind`: a pointer set
    bound by one path is not encoded again by the other, and a slot rewritten behind its back
    is rebound."""
    plan, launched = FakePlan(), []
    a, sa, b, sb, _, out = tensors = operands()
    fast, _ = fast_with(ext, plan, tensors, launched)
    other = torch.empty_like(out)
    plan._bind_maps([a.data_ptr(), b.data_ptr(), sa.data_ptr(), sb.data_ptr(), other.data_ptr(), 0, 0])
    assert len(plan.encodes) == 5
    assert fast(a, sa, b, sb, None, other) is other
    assert len(plan.encodes) == 5
    out_map = plan.maps[2]
    plan.pack.params[out_map.index] = 0  # written elsewhere: C++ notices and binds again
    assert fast(a, sa, b, sb, None, other) is other
    assert plan.pack.params[out_map.index] == out_map.encoded[other.data_ptr()][1]


def test_a_dropped_encoding_is_forgotten_by_the_compiled_path(ext, monkeypatch):
    """tma.py keeps ENCODINGS_KEPT encodings a map; one it drops (its buffer freed) must not
    stay bound or cached in C++."""
    monkeypatch.setattr(tma.TensorMap, "ENCODINGS_KEPT", 2)
    plan, launched = FakePlan(), []
    a, sa, b, sb, _, out = tensors = operands()
    fast, _ = fast_with(ext, plan, tensors, launched)
    outs = [out] + [torch.empty_like(out) for _ in range(2)]
    for o in outs:
        assert fast(a, sa, b, sb, None, o) is o
    out_map = plan.maps[2]
    assert outs[0].data_ptr() not in out_map.encoded  # dropped: the oldest
    before = len(plan.encodes)
    assert fast(a, sa, b, sb, None, outs[0]) is outs[0]
    assert plan.encodes[before:] == [(out_map.index, outs[0].data_ptr())], "encoded again, not a freed buffer"
    assert plan.pack.params[out_map.index] == out_map.encoded[outs[0].data_ptr()][1]


def test_the_pack_lock_is_taken_while_a_python_launch_holds_it(ext):
    """The Python path releases the GIL inside its ctypes launch while holding the pack lock:
    a C++ call on another thread waits for it."""
    plan, launched = FakePlan(), []
    a, sa, b, sb, _, out = tensors = operands()
    fast, _ = fast_with(ext, plan, tensors, launched)
    done = threading.Event()
    with plan.pack.lock:
        t = threading.Thread(target=lambda: (fast(a, sa, b, sb, None, out), done.set()))
        t.start()
        assert not done.wait(0.2) and launched == []
    t.join(5)
    assert done.is_set() and len(launched) == 1


@pytest.fixture
def fresh_state(monkeypatch):
    """fast_launch's process state, as before any build (restored afterwards)."""
    for name, value in (("_thread", None), ("_module", None), ("_failed", False)):
        monkeypatch.setattr(fast_launch, name, value)


def test_a_failed_build_warns_once_and_plans_stay_on_the_python_path(fresh_state, monkeypatch):
    def broken():
        raise RuntimeError("Error building extension 'kdsl_fast_gemm'\nc++: fatal error: no input files")
    monkeypatch.setattr(fast_launch, "_build", broken)
    with pytest.warns(RuntimeWarning, match="could not be built .*no input files.*Python launch path"):
        fast_launch.start()
        assert fast_launch.wait() is False
    fast_launch.start()  # no second build, no second warning
    assert fast_launch._thread is not None and not fast_launch._thread.is_alive()
    plan = FakePlan()
    plan.framework, plan.sk_tiles, plan.fast = "torch", 0, None
    kernel = type("Kernel", (), {"launch_path": "compiled", "fast_gemm": None, "extra": None})()
    fast_launch.adopt(kernel, plan, operands(), True)
    assert plan.fast is False and kernel.fast_gemm is None


def test_while_building_a_plan_waits_to_be_adopted(fresh_state, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(fast_launch, "_build", lambda: release.wait(5) and None)
    plan = FakePlan()
    plan.framework, plan.sk_tiles, plan.fast = "torch", 0, None
    kernel = type("Kernel", (), {"launch_path": "compiled", "fast_gemm": None, "extra": None})()
    fast_launch.adopt(kernel, plan, operands(), True)  # starts the build, does not wait for it
    assert plan.fast is None and fast_launch._thread.is_alive()
    release.set()
    fast_launch.wait()


@pytest.mark.parametrize("per_stream", ["stream-K", "tile counter"])
def test_plans_with_per_stream_state_stay_on_the_python_path(fresh_state, monkeypatch, per_stream):
    """Stream-K's workspace and a contiguous GEMM's tile counters are per stream and off while a
    graph is captured, which Python decides per call: such plans are never adopted."""
    monkeypatch.setattr(fast_launch, "_module", object())  # a built extension that must not be reached
    plan = FakePlan(sk=5 if per_stream == "stream-K" else 0)
    plan.framework, plan.fast, plan.dynamic = "torch", None, per_stream == "tile counter"
    kernel = type("Kernel", (), {"launch_path": "compiled", "fast_gemm": None, "extra": None})()
    fast_launch.adopt(kernel, plan, operands(), True)
    assert plan.fast is False and kernel.fast_gemm is None


def test_the_switch_turns_the_path_off(fresh_state, monkeypatch):
    monkeypatch.setenv("KDSL_FAST_LAUNCH", "0")
    fast_launch.start()
    assert fast_launch._thread is None and fast_launch.wait() is False and fast_launch.module() is None


def test_entries_added_during_a_call_leave_it_whole(ext):
    """A Python callback inside a call (here the encoder) lets another thread run, which may
    adopt plans: entries added then must not move the one being launched."""
    plan, launched = FakePlan(), []
    a, sa, b, sb, _, out = tensors = operands()
    fast, _ = fast_with(ext, plan, tensors, launched)
    others = []
    encode = plan.maps[0].encode

    def encode_and_adopt(*args):
        for _ in range(40):  # enough to reallocate a vector of entries several times
            other = FakePlan()
            others.append(other)
            fast_launch.register(fast, ext, other, None, tensors, out_given=True)
        return encode(*args)
    plan.maps[0].encode = encode_and_adopt
    assert fast(a, sa, b, sb, None, out) is out and len(fast) == 41
    assert [plan.param(i) for i in POINTER_PARAMS[:3]] == [sa.data_ptr(), sb.data_ptr(), out.data_ptr()]
    assert launched[0][:3] == (plan._launch._address, 0x5678, plan.pack.params_address)


def test_builds_run_apart_and_a_damaged_library_is_built_again(tmp_path, monkeypatch):
    """Each build has a directory of its own (a build killed mid-way, its lock left behind,
    holds up no later one) and its library is renamed into the cache when complete; a library
    that does not import is built again. torch's build and import are stood in for."""
    import torch.utils.cpp_extension as cpp_extension
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    native = tmp_path / "native"
    native.mkdir()
    killed = native / "kdsl_fast_gemm_0123-killed"
    killed.mkdir()
    (killed / "lock").write_text("")  # what torch's build lock leaves when its process dies
    builds = []

    def build(name, sources, extra_cflags, build_directory, verbose):
        builds.append(Path(build_directory))
        (Path(build_directory) / "lock").write_text("")
        (Path(build_directory) / f"{name}.so").write_bytes(b"library %d" % len(builds))
        return f"module {len(builds)}"

    def load_library(name, path):
        if path.read_bytes() == b"damaged":
            raise ImportError("invalid ELF header")
        return f"imported {path.read_bytes().decode()}"
    monkeypatch.setattr(cpp_extension, "load", build)
    monkeypatch.setattr(fast_launch, "_import", load_library)
    assert fast_launch._build() == "module 1"
    (library,) = native.glob("kdsl_fast_gemm_*.so")
    assert library.read_bytes() == b"library 1"
    assert fast_launch._build() == "imported library 1"  # in the cache: no second build
    library.write_bytes(b"damaged")
    assert fast_launch._build() == "module 2" and library.read_bytes() == b"library 2"
    assert len(builds) == 2 and builds[0] != builds[1] and all(b.parent == native for b in builds)
    assert not any(b.exists() for b in builds), "build directories are removed"
    assert (killed / "lock").exists()  # another process's: left alone
