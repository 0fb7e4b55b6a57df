// Prefill matmul in f32 on any adapter, over the tile of matmul_tile.wgsl: 8 rows x 4 columns
// per invocation, K steps staged through workgroup memory (16 KiB in all: the portable limit).
// Per four k's a thread reads 8 + 4 vec4s from workgroup memory for 128 multiply-adds (the
// 4x4-per-thread version read 8 for 64, through dot products).

@group(0) @binding(2) var<storage, read> a: array<vec4<f32>>;

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

// Invocation `lid` of `wg` (128) loads A elements lid + q wg (q < 4) and W runs lid + q wg (q < 2).
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

var<workgroup> a_sh: array<vec4<f32>, 512>;  // [BM][BK / 4]: row m, four k's; swizzled
// [BN][BK / 4]: row n, four k's; swizzled as A. Each invocation stores whole vec4s of the eight
// k's it loaded: with W stored k-major (a vec4 of four n's) four invocations wrote the four lanes
// of one vec4, and a store to a vector's component may rewrite the whole vector (Metal, D3D:
// WGSL allows it), a race.
var<workgroup> w_sh: array<vec4<f32>, 512>;

// A rows are 8 vec4 (32 words) long, so the threads reading 8 different rows at one column would
// all hit one memory bank; XOR-ing the column with the row's group spreads them. W's rows alike.
fn sw(row: u32, col: u32) -> u32 {
    return row * 8u + (col ^ ((row >> 2u) & 7u));
}

// Run j of W (matmul_tile.wgsl load_w): row j / 4, k's 8 (j % 4) .. + 7.
fn store_w(j: u32, w: W8) {
    let r = j / 4u;
    let kq = (j % 4u) * 2u;
    w_sh[sw(r, kq)] = w.lo;
    w_sh[sw(r, kq + 1u)] = w.hi;
}

fn store_tile(t: Tile, lid: u32) {
    a_sh[sw(lid / 8u, lid % 8u)] = t.a0;
    a_sh[sw((lid + 128u) / 8u, lid % 8u)] = t.a1;
    a_sh[sw((lid + 256u) / 8u, lid % 8u)] = t.a2;
    a_sh[sw((lid + 384u) / 8u, lid % 8u)] = t.a3;
    store_w(lid, t.w0);
    store_w(lid + 128u, t.w1);
}

// Four k's of row i against the four columns' weights at those k's (each a vec4 over k).
fn fma4(acc: vec4<f32>, a4: vec4<f32>, w0: vec4<f32>, w1: vec4<f32>, w2: vec4<f32>, w3: vec4<f32>) -> vec4<f32> {
    return acc + vec4<f32>(dot(a4, w0), dot(a4, w1), dot(a4, w2), dot(a4, w3));
}

@compute @workgroup_size(16, 8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let m0 = wg.y * BM;
    let n0 = wg.x * BN;
    let tx = lid3.x;   // columns n0 + 4 tx ..
    let ty = lid3.y;   // rows m0 + 8 ty ..
    // Named registers rather than arrays: an array indexed in a loop may be put in local memory.
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var acc4 = vec4<f32>(0.0);
    var acc5 = vec4<f32>(0.0);
    var acc6 = vec4<f32>(0.0);
    var acc7 = vec4<f32>(0.0);
    var t = load_tile(m0, n0, 0u, lid, 128u);
    for (var k0 = 0u; k0 < K; k0 += BK) {
        store_tile(t, lid);
        workgroupBarrier();
        if (k0 + BK < K) {
            t = load_tile(m0, n0, k0 + BK, lid, 128u);
        }
        for (var kq = 0u; kq < BK / 4u; kq++) {
            let w0 = w_sh[sw(4u * tx, kq)];
            let w1 = w_sh[sw(4u * tx + 1u, kq)];
            let w2 = w_sh[sw(4u * tx + 2u, kq)];
            let w3 = w_sh[sw(4u * tx + 3u, kq)];
            let r = ty * 8u;
            acc0 = fma4(acc0, a_sh[sw(r, kq)], w0, w1, w2, w3);
            acc1 = fma4(acc1, a_sh[sw(r + 1u, kq)], w0, w1, w2, w3);
            acc2 = fma4(acc2, a_sh[sw(r + 2u, kq)], w0, w1, w2, w3);
            acc3 = fma4(acc3, a_sh[sw(r + 3u, kq)], w0, w1, w2, w3);
            acc4 = fma4(acc4, a_sh[sw(r + 4u, kq)], w0, w1, w2, w3);
            acc5 = fma4(acc5, a_sh[sw(r + 5u, kq)], w0, w1, w2, w3);
            acc6 = fma4(acc6, a_sh[sw(r + 6u, kq)], w0, w1, w2, w3);
            acc7 = fma4(acc7, a_sh[sw(r + 7u, kq)], w0, w1, w2, w3);
        }
        workgroupBarrier();
    }
    let m = m0 + ty * 8u;
    let n = n0 + tx * 4u;
    store(m, n, acc0);
    store(m + 1u, n, acc1);
    store(m + 2u, n, acc2);
    store(m + 3u, n, acc3);
    store(m + 4u, n, acc4);
    store(m + 5u, n, acc5);
    store(m + 6u, n, acc6);
    store(m + 7u, n, acc7);
}

