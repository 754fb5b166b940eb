"""Split-KV forward builds (Program(split_kv=True)) of generated programs (tests/fuzzgen.py) at random
head and value dims, for SECONDS: how many built, spilled (local memory; each spill rebuilt with a row
at a time in the self-merge, KDSL_MERGE_ROWS=1, to tell the merge's row batches from what spilled
anyway) or failed. Offline, no GPU (bench/NOTES.md, fifty-second session).

    python3 tools/dev/split_build_fuzz.py SECONDS
"""
import os
import pathlib
import random
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
import fuzzgen
from kdsl.errors import SourceError, KdslError
from kdsl.grammar import parse
from kdsl.passes import pipeline
from kdsl.runtime import cubin_info
from kdsl.runtime.compiler import build
from kdsl.runtime.programs import Program
rng = random.Random(52); start = time.time(); LIMIT = float(sys.argv[1])
counts = {"built": 0, "spilled": 0, "failed": 0, "diag": 0}
class Done(Exception): pass
@seed(5252)
@settings(max_examples=10**6, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(fuzzgen.programs())
def one(text):
    if time.time() - start > LIMIT: raise Done
    try:
        ks = [k for k in pipeline.check(parse(text, "f.kd")) if k.kind == "attention"]
    except SourceError:
        counts["diag"] += 1; return
    for k in ks:
        d = rng.choice([32, 64, 80, 96, 128, 160, 192, 256])
        dv = rng.choice([d, d, 64, 96, 128])
        try:
            b = build(k, "sm_90a", d, value_dim=dv, program=Program(split_kv=True))
            sp = cubin_info.frame_bytes(b.compiled.cubin, b.generated.entry)
            if sp:
                counts["spilled"] += 1
                os.environ["KDSL_DEFINES"] = "KDSL_MERGE_ROWS=1"
                try:
                    b1 = build(k, "sm_90a", d, value_dim=dv, program=Program(split_kv=True))
                finally:
                    del os.environ["KDSL_DEFINES"]
                sp1 = cubin_info.frame_bytes(b1.compiled.cubin, b1.generated.entry)
                counts["spilled_at_R1_too"] = counts.get("spilled_at_R1_too", 0) + bool(sp1)
                print("SPILL", d, dv, sp, "R1:", sp1, b.kernel.attr("consumers"), b.kernel.attr("tile_n"), text[:400].replace("\n", " | "), flush=True)
            else:
                counts["built"] += 1
        except (SourceError, KdslError):
            counts["diag"] += 1
        except Exception as e:
            counts["failed"] += 1
            print("FAILED", d, dv, "".join(traceback.format_exception_only(type(e), e))[:500], text[:800], flush=True)
try: one()
except Done: pass
print(counts, f"{time.time()-start:.0f} s", flush=True)
