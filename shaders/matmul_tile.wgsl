// The prefill matmul's tile, shared by its variants (matmul.wgsl in f32 on any adapter,
// matmul_coop.wgsl and matmul_coop_wide.wgsl on matrix units): C[m, n] (+)= sum_k A[m, k] *
// W[n, k] (+ bias[n]) in output tiles of 64x64 (128x128 wide), K in steps of 32 (64 wide). This file holds
// the constants, the output bindings, the weight loads of one K step (each invocation's share,
// issued before the previous step's arithmetic so their latency hides behind it) and the
// epilogue; each variant declares its A (binding 2) itself.
// Bindings: 0 W words, 1 W block meta (layout.wgsl), 2 A, 3 C, 4 vecs (biases); 5 step.
// Dispatch: Tiles(N): (ceil(N / 64), ceil(tokens / 64)).

override K: u32;

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

fn load_w(n0: u32, k0: u32, j: u32) -> W8 {
    let r = j / 4u;
    let kk = (j % 4u) * 8u;
    if (n0 + r < N && k0 + kk < K) {
        return load8((n0 + r) * K + k0 + kk);
    }
    var z: W8;
    z.lo = vec4<f32>(0.0);
    z.hi = vec4<f32>(0.0);
    return z;
}
