import timeit, torch, sys
sys.path.insert(0, '.')
import kdsl
from kdsl.runtime import launch as L
from kdsl.runtime import driver as Dr
rel = kdsl.load("samples/relpos.kd").relpos
q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
out = torch.empty_like(q)
rel(q, k, k, out=out); torch.cuda.synchronize()
plan = next(iter(rel._plans.values()))
n = 20000
def t(name, f):
    torch.cuda._sleep(1_000_000_000)
    print(f"{name:30s} {timeit.timeit(f, number=n)/n*1e6:.2f} us", flush=True)
    torch.cuda.synchronize()
t("signature", lambda: L._signature((q, k, k), (out, None, None)))
t("stream", lambda: L._stream(plan))
t("raw stream", lambda: torch._C._cuda_getCurrentRawStream(0))
ptrs = [q.data_ptr(), k.data_ptr(), k.data_ptr(), out.data_ptr(), 0]
t("driver launch only", lambda: Dr.launch(plan.loaded.fn_ptr, plan.grid, plan.block, plan.loaded.smem, 0, plan.pack, ptrs))
t("full call", lambda: rel(q, k, k, out=out))
import cProfile, pstats
torch.cuda._sleep(1_000_000_000)
cProfile.run("for _ in range(20000): rel(q, k, k, out=out)", "/tmp/prof")
pstats.Stats("/tmp/prof").sort_stats("tottime").print_stats(12)
