// C[m, n] (+)= sum_k A[m, k] * W[n, k] (+ bias[n]) for many activation rows (prefill).
// 64x64 output tile per workgroup, 4x4 per thread, K in steps of 32 staged through workgroup
// memory (16 KiB in all: the portable limit).

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

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
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> a_sh: array<vec4<f32>, 512>;  // [BM][BK / 4], swizzled
var<workgroup> w_sh: array<vec4<f32>, 512>;  // [BN][BK / 4], swizzled

// Rows are 8 vec4 (32 words) long, so without a swizzle the 16 threads reading 16 different rows
// at the same column all hit one memory bank; XOR-ing the column with the row's group spreads them.
fn sw(row: u32, col: u32) -> u32 {
    return row * 8u + (col ^ ((row >> 2u) & 7u));
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let M = step.n_tokens;
    let m0 = wg.y * BM;
    let n0 = wg.x * BN;
    let tx = lid3.x;
    let ty = lid3.y;
    // Named registers rather than arrays: an array indexed in a loop may be put in local memory.
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < K; k0 += BK) {
        // One load8 of W per thread: row lid / 4, eight k's at (lid % 4) * 8.
        {
            let r = lid / 4u;
            let kk = (lid % 4u) * 8u;
            var w: W8;
            if (n0 + r < N && k0 + kk < K) {
                w = load8((n0 + r) * K + k0 + kk);
            } else {
                w.lo = vec4<f32>(0.0);
                w.hi = vec4<f32>(0.0);
            }
            w_sh[sw(r, kk / 4u)] = w.lo;
            w_sh[sw(r, kk / 4u + 1u)] = w.hi;
        }
        for (var i = lid; i < 512u; i += 256u) {
            let r = i / 8u;
            let kq = i % 8u;
            var v = vec4<f32>(0.0);
            if (m0 + r < M && k0 + kq * 4u < K) {
                v = a[((m0 + r) * K + k0) / 4u + kq];
            }
            a_sh[sw(r, kq)] = v;
        }
        workgroupBarrier();
        for (var kq = 0u; kq < BK / 4u; kq++) {
            let w0 = w_sh[sw(tx * 4u, kq)];
            let w1 = w_sh[sw(tx * 4u + 1u, kq)];
            let w2 = w_sh[sw(tx * 4u + 2u, kq)];
            let w3 = w_sh[sw(tx * 4u + 3u, kq)];
            let a0 = a_sh[sw(ty * 4u, kq)];
            let a1 = a_sh[sw(ty * 4u + 1u, kq)];
            let a2 = a_sh[sw(ty * 4u + 2u, kq)];
            let a3 = a_sh[sw(ty * 4u + 3u, kq)];
            acc0 += vec4<f32>(dot(a0, w0), dot(a0, w1), dot(a0, w2), dot(a0, w3));
            acc1 += vec4<f32>(dot(a1, w0), dot(a1, w1), dot(a1, w2), dot(a1, w3));
            acc2 += vec4<f32>(dot(a2, w0), dot(a2, w1), dot(a2, w2), dot(a2, w3));
            acc3 += vec4<f32>(dot(a3, w0), dot(a3, w1), dot(a3, w2), dot(a3, w3));
        }
        workgroupBarrier();
    }
    store(m0 + ty * 4u, n0 + tx * 4u, acc0);
    store(m0 + ty * 4u + 1u, n0 + tx * 4u, acc1);
    store(m0 + ty * 4u + 2u, n0 + tx * 4u, acc2);
    store(m0 + ty * 4u + 3u, n0 + tx * 4u, acc3);
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
