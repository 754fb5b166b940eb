"""The GPU path and the CPU interpreter refuse the same bad calls with the same message:
both run kdsl.runtime.launch's validate and kdsl.runtime.bounds."""
import pytest

import kdsl
from kdsl.errors import LaunchError

pytestmark = pytest.mark.gpu

SRC = """
attention lookup {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    ids: i32[B, M]
    tbl: f32[5]
    score(s, b, h, i, j) = s + tbl[ids[b, i]]
}
attention clamped {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    ids: i32[B, M]
    tbl: f32[5]
    score(s, b, h, i, j) = s + tbl[min(max(ids[b, i], 0), 4)]
}
"""


def _calls(torch, device):
    bf = dict(dtype=torch.bfloat16, device=device)
    x = torch.zeros(1, 4, 8, 64, **bf)
    ids = torch.full((1, 8), 1000, dtype=torch.int32, device=device)
    tbl = torch.zeros(5, device=device)
    return {
        "unboundable index": ("lookup", (x, x, x, ids, tbl)),
        "head dim": ("clamped", (torch.zeros(1, 4, 8, 264, **bf),) * 3 + (ids, tbl)),  # 40 is padded now
        "heads": ("clamped", (x, torch.zeros(1, 3, 8, 64, **bf), torch.zeros(1, 3, 8, 64, **bf), ids, tbl)),
        "ids shape": ("clamped", (x, x, x, ids[:, :4].contiguous(), tbl)),
        "ids dtype": ("clamped", (x, x, x, ids.long(), tbl)),
    }


@pytest.mark.parametrize("case", ["unboundable index", "head dim", "heads", "ids shape", "ids dtype"])
def test_same_refusal_on_the_gpu_and_in_the_interpreter(case):
    torch = pytest.importorskip("torch")
    gpu, cpu = kdsl.compile(SRC, "lookup.kd"), kdsl.compile(SRC, "lookup.kd", interpret=True)
    name, gpu_args = _calls(torch, "cuda")[case]
    _, cpu_args = _calls(torch, "cpu")[case]
    with pytest.raises(LaunchError) as on_gpu:
        getattr(gpu, name)(*gpu_args)
    with pytest.raises(LaunchError) as on_cpu:
        getattr(cpu, name)(*cpu_args)
    assert str(on_gpu.value) == str(on_cpu.value)
