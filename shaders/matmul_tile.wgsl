// The prefill matmul's tile, shared by its two variants (matmul.wgsl in f32 on any adapter,
// matmul_coop.wgsl on matrix units): C[m, n] (+)= sum_k A[m, k] * W[n, k] (+ bias[n]) in 64x64
// output tiles, one per workgroup of 128 invocations, K in steps of 32. This file holds the
// constants and bindings, the global loads of one K step (each invocation's share, issued before
// the previous step's arithmetic so their latency hides behind it) and the epilogue.
// Bindings: 0 W words, 1 W block meta (layout.wgsl), 2 A, 3 C, 4 vecs (biases); 5 step.
// Dispatch: Tiles(N): (ceil(N / 64), ceil(tokens / 64)).

override K: u32;
override N: u32;
override ACCUMULATE: bool = false;
override HAS_BIAS: bool = false;
override BIAS_OFF: u32 = 0u;   // bias offset in `vecs`

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

@group(0) @binding(2) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@group(0) @binding(4) var<storage, read> vecs: array<f32>;

// This thread's share of one K step: 4 vec4 of A and 2 runs of 8 weights.
struct Tile {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    w0: W8,
    w1: W8,
}

fn load_a(m0: u32, k0: u32, i: u32) -> vec4<f32> {
    let r = i / 8u;
    let kq = i % 8u;
    if (m0 + r < step.n_tokens && k0 + kq * 4u < K) {
        return a[((m0 + r) * K + k0) / 4u + kq];
    }
    return vec4<f32>(0.0);
}

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

// Invocation `lid` of `wg` loads A elements lid + q wg (q < 4) and W runs lid + q wg (q < 2): a
// 64-row tile with 128 invocations (matmul.wgsl, matmul_coop.wgsl), 128 rows with 256.
fn load_tile(m0: u32, n0: u32, k0: u32, lid: u32, wg: u32) -> Tile {
    var t: Tile;
    t.a0 = load_a(m0, k0, lid);
    t.a1 = load_a(m0, k0, lid + wg);
    t.a2 = load_a(m0, k0, lid + 2u * wg);
    t.a3 = load_a(m0, k0, lid + 3u * wg);
    t.w0 = load_w(n0, k0, lid);
    t.w1 = load_w(n0, k0, lid + wg);
    return t;
}

// Four outputs of row m from column n on, with bias and residual as configured.
fn store(m: u32, n: u32, v4: vec4<f32>) {
    if (m >= step.n_tokens) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (n + j >= N) {
            return;
        }
        var v = v4[j];
        if (HAS_BIAS) {
            v += vecs[BIAS_OFF + n + j];
        }
        let o = m * N + n + j;
        if (ACCUMULATE) {
            v += c[o];
        }
        c[o] = v;
    }
}
