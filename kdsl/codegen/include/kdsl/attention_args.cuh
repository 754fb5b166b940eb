// kdsl/attention_args.cuh — what every attention kernel passes to the generated Variant.
#pragma once
#include "kdsl/common.cuh"

namespace kdsl {

struct AttnArgs {
  const void* q; const void* k; const void* v; void* o; float* lse;  // lse may be nullptr
  int B, H, Hkv, M, N;   // q:[B,H,M,D] k,v:[B,Hkv,N,D] o:[B,H,M,D] lse:[B,H,M]; contiguous
  float scale_log2;      // softmax scale * log2(e), for the Variant to use
};

}  // namespace kdsl
