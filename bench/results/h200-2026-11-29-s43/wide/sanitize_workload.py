# racecheck / memcheck workload: the wide backward at a few ragged shapes
import torch, kdsl
mod = kdsl.compile("attention w {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, Dv]\n mask(b, h, i, j) = j <= i + 40\n}\n")
for (M, N, D, Dv) in [(130, 200, 256, 256), (70, 129, 160, 96), (65, 64, 64, 256)]:
    q = torch.randn(1, 2, M, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, 1, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, 1, N, Dv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mod.w(q, k, v).float().square().sum().backward()
torch.cuda.synchronize(); print("wide workload ok")
