// kdsl/runtime/native/fast_gemm.cpp — the FP8 GEMM's eager call in C++ (runtime/fast_launch.py
// builds it and hands it plans). Python's path costs ~12-16 us of host time a call, mostly in
// building the plan key from ~20 tensor getters, torch.empty and ctypes; here the same call
// costs ~5-8 us.
//
// A FastGemm serves one GemmKernel. Each entry is one of its plans (runtime/launch.py's Plan):
// the call signature it was validated for, and the addresses of the plan's ctypes parameter
// block, launch configuration and tensor-map slots. A call that matches an entry exactly
// (dtype, device, sizes, strides of every tensor; alignment of every pointer) is launched
// here: allocate out, bind the tensor maps, write the pointer slots and the stream, call
// cuLaunchKernelEx. Anything else answers None, and the Python path takes the call: it
// validates, raises the located errors and adopts new plans.
//
// Sharing a plan with the Python path: both write the parameter block only under the plan's
// pack lock (driver.ArgPack.lock; the Python path releases the GIL in its ctypes launch), and
// once a plan is adopted both bind its tensor maps through `bind` here, so which pointer each
// map slot holds has one record.
#include <torch/extension.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace {

typedef int (*LaunchEx)(const void* config, const void* fn, void* const* params, void** extra);

// The pointers of a call, in gemm_launch.CALL_POINTERS order.
enum Pointer { kA, kB, kAScale, kBScale, kOut, kGroup, kCount, kPointers };

struct Layout {
  std::vector<int64_t> sizes, strides;
  int64_t dtype = 0, device = 0;
  bool same(const at::Tensor& t) const {
    return (int64_t)t.scalar_type() == dtype && t.get_device() == device && t.sizes().equals(sizes) &&
           t.strides().equals(strides);
  }
};

// A tensor-map parameter fed by call pointer `source`. Its encodings belong to runtime/tma.py's
// TensorMap: `encode` asks it for one (the address of its 128 bytes), and it calls `forget`
// when it drops one, so no address here outlives its buffer.
struct MapSlot {
  int64_t source = 0;
  uint64_t* param = nullptr;  // the kernel parameter: the address of the bound encoding
  std::unordered_map<uint64_t, uint64_t> encoded;
  py::object encode;
  uint64_t bound = 0, bound_address = 0;
};

struct Entry {
  std::vector<Layout> inputs;  // a, a_scale, b, b_scale[, extra]
  Layout out;                  // the given out's layout (out_given), else what to allocate
  bool has_extra = false, out_given = false;
  int64_t extra_source = kGroup;  // kGroup (contiguous) or kCount (masked)
  uint64_t sa_align = 16, sb_align = 16, out_align = 16;
  std::vector<MapSlot> maps;
  uint64_t* pointer_slots = nullptr;  // sa sb out group count
  uint64_t config = 0, fn = 0, params = 0;
  int64_t stream_offset = 0;
  py::object acquire, release, stream, owner;  // the pack's lock; the caller's stream; the plan
};

// Holds a plan's pack lock (a Python threading.Lock: acquiring it waits with the GIL released).
struct Locked {
  Entry& e;
  explicit Locked(Entry& entry) : e(entry) { e.acquire(); }
  ~Locked() { e.release(); }
};

bool tensor(py::handle h) { return THPVariable_Check(h.ptr()); }

class FastGemm {
 public:
  explicit FastGemm(uint64_t launch, py::object fail) : launch_((LaunchEx)launch), fail_(std::move(fail)) {}

  // layouts: (sizes, strides, dtype) of a, a_scale, b, b_scale[, extra], out; maps: (source,
  // parameter slot address, encode) of each tensor map. An entry is whole when it is added:
  // a call on another thread (the GIL changes hands inside Python callbacks) never sees part
  // of one, and entries never move (they are referred to while a callback runs).
  int64_t add(const std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, int64_t>>& layouts,
              const std::vector<std::tuple<int64_t, uint64_t, py::object>>& maps, int64_t device, bool has_extra,
              int64_t extra_source, bool out_given, uint64_t sa_align, uint64_t sb_align, uint64_t out_align,
              uint64_t pointer_slots,
              uint64_t config, int64_t stream_offset, uint64_t fn, uint64_t params, py::object lock,
              py::object stream, py::object owner) {
    const size_t inputs = has_extra ? 5 : 4;
    TORCH_CHECK(layouts.size() == inputs + 1, "FastGemm.add: the inputs' and out's layouts");
    TORCH_CHECK(extra_source == kGroup || extra_source == kCount, "FastGemm.add: extra_source");
    auto entry = std::make_unique<Entry>();
    Entry& e = *entry;
    for (size_t i = 0; i <= inputs; ++i) {
      Layout l{std::get<0>(layouts[i]), std::get<1>(layouts[i]), std::get<2>(layouts[i]), device};
      if (i < inputs)
        e.inputs.push_back(l);
      else
        e.out = l;
    }
    e.has_extra = has_extra, e.extra_source = extra_source, e.out_given = out_given;
    e.sa_align = sa_align, e.sb_align = sb_align, e.out_align = out_align;
    e.pointer_slots = reinterpret_cast<uint64_t*>(pointer_slots);
    e.config = config, e.stream_offset = stream_offset, e.fn = fn, e.params = params;
    e.acquire = lock.attr("acquire"), e.release = lock.attr("release");
    e.stream = std::move(stream), e.owner = std::move(owner);
    for (const auto& [source, param_slot, encode] : maps) {
      TORCH_CHECK(source >= 0 && source < kPointers, "FastGemm.add: a map's source");
      MapSlot m;
      m.source = source, m.param = reinterpret_cast<uint64_t*>(param_slot), m.encode = encode;
      e.maps.push_back(std::move(m));
    }
    entries_.push_back(std::move(entry));
    return (int64_t)entries_.size() - 1;
  }

  void forget(int64_t entry, int64_t map, uint64_t ptr) {
    MapSlot& m = entries_.at(entry)->maps.at(map);
    m.encoded.erase(ptr);
    if (m.bound == ptr) m.bound = m.bound_address = 0;
  }

  int64_t size() const { return (int64_t)entries_.size(); }

  // The Python path's binding of an adopted plan's maps (run under the pack lock it holds):
  // `pointers` in CALL_POINTERS order.
  void bind(int64_t entry, const std::vector<uint64_t>& pointers) {
    Entry& e = *entries_.at(entry);
    uint64_t p[kPointers] = {0};
    for (size_t i = 0; i < pointers.size() && i < kPointers; ++i) p[i] = pointers[i];
    bind_maps(e, p);
  }

  // The call's result, or None where the Python path must take it.
  py::object call(py::handle a, py::handle sa, py::handle b, py::handle sb, py::handle extra, py::handle out) {
    if (!tensor(a) || !tensor(sa) || !tensor(b) || !tensor(sb)) return py::none();
    const bool has_extra = !extra.is_none(), has_out = !out.is_none();
    if ((has_extra && !tensor(extra)) || (has_out && !tensor(out))) return py::none();
    const at::Tensor& ta = THPVariable_Unpack(a.ptr());
    const at::Tensor& tsa = THPVariable_Unpack(sa.ptr());
    const at::Tensor& tb = THPVariable_Unpack(b.ptr());
    const at::Tensor& tsb = THPVariable_Unpack(sb.ptr());
    for (const auto& entry : entries_) {
      Entry& e = *entry;
      if (e.has_extra != has_extra || e.out_given != has_out) continue;
      if (!e.inputs[0].same(ta) || !e.inputs[1].same(tsa) || !e.inputs[2].same(tb) || !e.inputs[3].same(tsb)) continue;
      if (has_extra && !e.inputs[4].same(THPVariable_Unpack(extra.ptr()))) continue;
      if (has_out && !e.out.same(THPVariable_Unpack(out.ptr()))) continue;
      return launch(e, ta, tsa, tb, tsb, extra, out);
    }
    return py::none();
  }

 private:
  void bind_maps(Entry& e, const uint64_t* p) {
    for (MapSlot& m : e.maps) {
      const uint64_t ptr = p[m.source];
      if (ptr == m.bound && *m.param == m.bound_address) continue;
      auto it = m.encoded.find(ptr);
      uint64_t address;
      if (it != m.encoded.end()) {
        address = it->second;
      } else {
        m.bound = m.bound_address = 0;  // until ptr's encoding is in the slot
        address = m.encode(ptr).cast<uint64_t>();  // may call forget for an older one
        m.encoded[ptr] = address;
      }
      *m.param = address;
      m.bound = ptr, m.bound_address = address;
    }
  }

  py::object launch(Entry& e, const at::Tensor& a, const at::Tensor& sa, const at::Tensor& b, const at::Tensor& sb,
                    py::handle extra, py::handle out) {
    uint64_t p[kPointers] = {(uint64_t)a.data_ptr(), (uint64_t)b.data_ptr(), (uint64_t)sa.data_ptr(),
                             (uint64_t)sb.data_ptr(), 0, 0, 0};
    if ((p[kA] | p[kB]) & 15 || p[kAScale] % e.sa_align || p[kBScale] % e.sb_align)
      return py::none();  // Python says why, or takes its plan with the scales copied
    py::object result;
    if (!out.is_none()) {
      p[kOut] = (uint64_t)THPVariable_Unpack(out.ptr()).data_ptr();
      if (p[kOut] % e.out_align) return py::none();
      result = py::reinterpret_borrow<py::object>(out);
    } else {
      at::Tensor o = at::empty(e.out.sizes, at::TensorOptions()
                                                .dtype((at::ScalarType)e.out.dtype)
                                                .device(at::kCUDA, (c10::DeviceIndex)e.out.device));
      p[kOut] = (uint64_t)o.data_ptr();
      if (p[kOut] % e.out_align) return py::none();
      result = py::cast(std::move(o));
    }
    if (!extra.is_none()) p[e.extra_source] = (uint64_t)THPVariable_Unpack(extra.ptr()).data_ptr();
    const uint64_t stream = e.stream().cast<uint64_t>();
    int status;
    {
      Locked hold(e);
      bind_maps(e, p);
      for (int i = 0; i < 5; ++i) e.pointer_slots[i] = p[kAScale + i];
      *reinterpret_cast<uint64_t*>(e.config + e.stream_offset) = stream;
      status = launch_((const void*)e.config, (const void*)e.fn, reinterpret_cast<void* const*>(e.params), nullptr);
    }
    if (status) fail_(status);  // raises kdsl's error, with the driver's message
    return result;
  }

  LaunchEx launch_;
  py::object fail_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scalar_type", [](const at::Tensor& t) { return (int64_t)t.scalar_type(); });
  py::class_<FastGemm>(m, "FastGemm")
      .def(py::init<uint64_t, py::object>(), py::arg("launch"), py::arg("fail"))
      .def("add", &FastGemm::add)
      .def("forget", &FastGemm::forget)
      .def("bind", &FastGemm::bind)
      .def("__len__", &FastGemm::size)
      .def("__call__", &FastGemm::call);
}
