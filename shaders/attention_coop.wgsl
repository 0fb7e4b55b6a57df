// Prefill attention on the matrix units (cooperative matrices, like matmul_coop.wgsl), for full
// (not sliding) layers with HD a multiple of 16 up to 128 and caches of a multiple of 64 slots.
// One workgroup per (query head, 64 queries): four 32-wide subgroups, each owning 16 queries.
// Q·Kᵀ and P·V are 16x16 f16 products accumulated in f32, K and V read straight from the f16
// cache (position p in slot p, rows of HD halves). Two passes over the keys instead of an online
// softmax: the rescaling an online softmax needs cannot be applied to a cooperative matrix, so
// pass 1 finds each query's max and sum and pass 2 accumulates exp(s - max) · V, dividing by
// the sum at the end; the second Q·Kᵀ costs less than moving the output through memory every
// chunk. Same constants as attention.wgsl (WINDOW must be 0). Keys past the last allowed one
// get probability 0; their cache slots hold earlier finite values or zeros.
// Dispatch: (NH, ceil(tokens / 64)).

override HD: u32;
override NH: u32;
override NKV: u32;
override CTX: u32;
override CAP: u32;
override SCALE: f32;
override SOFTCAP: f32 = 0.0;
override WINDOW: u32 = 0u;
override CAUSAL: bool = true;
override QSTRIDE: u32;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<f16>;  // the layer's KV buffer: k half
@group(0) @binding(2) var<storage, read> v_cache: array<f16>;  // the same buffer, v half after it
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const QB: u32 = 64u;    // queries a workgroup
const KC: u32 = 64u;    // keys a chunk
// Row strides: 16 bytes past a multiple of 128 so the rows a matrix load reads spread over the
// banks (matmul_f16.wgsl).
const QS: u32 = 136u;   // f16, HD <= 128
const SS: u32 = 68u;    // f32
const PS: u32 = 72u;    // f16

var<workgroup> q_h: array<f16, 8704>;   // [QB][QS]: the queries, scaled
var<workgroup> s_sh: array<f32, 4352>;  // [QB][SS]: a chunk's scores, later the output
var<workgroup> p_h: array<f16, 4608>;   // [QB][PS]: a chunk's probabilities
var<workgroup> stats: array<vec2<f32>, 128>;

// Scores of the subgroup's 16 queries (tile rows sq..) against keys kc .. kc + 63, into s_sh.
fn scores(kc: u32, sq: u32, kbase: u32) {
    var s0 = coop_mat16x16<f32, C>();
    var s1 = coop_mat16x16<f32, C>();
    var s2 = coop_mat16x16<f32, C>();
    var s3 = coop_mat16x16<f32, C>();
    let k0 = kbase + kc * HD;
    for (var d = 0u; d < HD; d += 16u) {
        let a = coopLoadT<coop_mat16x16<f16, A>>(&q_h[sq * QS + d], QS);
        s0 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&k_cache[k0 + d], HD), s0);
        s1 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&k_cache[k0 + 16u * HD + d], HD), s1);
        s2 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&k_cache[k0 + 32u * HD + d], HD), s2);
        s3 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&k_cache[k0 + 48u * HD + d], HD), s3);
    }
    coopStoreT(s0, &s_sh[sq * SS], SS);
    coopStoreT(s1, &s_sh[sq * SS + 16u], SS);
    coopStoreT(s2, &s_sh[sq * SS + 32u], SS);
    coopStoreT(s3, &s_sh[sq * SS + 48u], SS);
}

// Score of tile row `row` against key `key` (column c of the chunk), masked and soft-capped.
fn score(row: u32, c: u32, key: u32, qpos: u32, end: u32) -> f32 {
    if (key >= end || (CAUSAL && key > qpos)) {
        return -3.0e38;
    }
    var d = s_sh[row * SS + c];
    if (SOFTCAP > 0.0) {
        d = SOFTCAP * tanh(d / SOFTCAP);
    }
    return d;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wg.x;
    let t0 = wg.y * QB;
    let kvh = h / (NH / NKV);
    let sq = (lid / 32u) * 16u;
    let lane = lid % 32u;
    for (var i = lid; i < QB * HD; i += 128u) {
        let r = i / HD;
        var v = 0.0;
        if (t0 + r < step.n_tokens) {
            v = q[(t0 + r) * QSTRIDE + h * HD + i % HD] * SCALE;
        }
        q_h[r * QS + i % HD] = f16(v);
    }
    var end = step.pos0 + min(t0 + QB, step.n_tokens);
    if (!CAUSAL) {
        end = step.pos0 + step.n_tokens;
    }
    let kbase = kvh * CAP * HD;
    let vbase = NKV * CAP * HD + kbase;
    // Lane pairs own a query row: this lane columns c0 .. c0 + 31 of each chunk.
    let row = sq + lane / 2u;
    let qpos = step.pos0 + t0 + row;
    let c0 = (lane % 2u) * 32u;
    var m = -3.0e38;
    var l = 0.0;
    workgroupBarrier();
    for (var kc = 0u; kc < end; kc += KC) {
        scores(kc, sq, kbase);
        workgroupBarrier();
        for (var j = 0u; j < 32u; j++) {
            let sc = score(row, c0 + j, kc + c0 + j, qpos, end);
            let mn = max(m, sc);
            l = l * exp(m - mn) + exp(sc - mn);
            m = mn;
        }
        workgroupBarrier();
    }
    stats[lid] = vec2<f32>(m, l);
    workgroupBarrier();
    let other = stats[lid ^ 1u];
    let mx = max(m, other.x);
    let sum = l * exp(m - mx) + other.y * exp(other.x - mx);

    var o0 = coop_mat16x16<f32, C>();
    var o1 = coop_mat16x16<f32, C>();
    var o2 = coop_mat16x16<f32, C>();
    var o3 = coop_mat16x16<f32, C>();
    var o4 = coop_mat16x16<f32, C>();
    var o5 = coop_mat16x16<f32, C>();
    var o6 = coop_mat16x16<f32, C>();
    var o7 = coop_mat16x16<f32, C>();
    for (var kc = 0u; kc < end; kc += KC) {
        scores(kc, sq, kbase);
        workgroupBarrier();
        for (var j = 0u; j < 32u; j++) {
            p_h[row * PS + c0 + j] = f16(exp(score(row, c0 + j, kc + c0 + j, qpos, end) - mx));
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KC; kk += 16u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&p_h[sq * PS + kk], PS);
            let vrow = vbase + (kc + kk) * HD;
            if (HD > 0u) {
                o0 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 0u], HD), o0);
            }
            if (HD > 16u) {
                o1 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 16u], HD), o1);
            }
            if (HD > 32u) {
                o2 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 32u], HD), o2);
            }
            if (HD > 48u) {
                o3 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 48u], HD), o3);
            }
            if (HD > 64u) {
                o4 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 64u], HD), o4);
            }
            if (HD > 80u) {
                o5 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 80u], HD), o5);
            }
            if (HD > 96u) {
                o6 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 96u], HD), o6);
            }
            if (HD > 112u) {
                o7 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&v_cache[vrow + 112u], HD), o7);
            }
        }
    }

    // The output in groups of 64 dimensions through the subgroup's rows of s_sh.
    let t = t0 + row;
    let inv = 1.0 / sum;
    for (var g = 0u; g * 64u < HD; g++) {
        workgroupBarrier();
        if (g == 0u) {
        if (HD > 0u) {
            coopStoreT(o0, &s_sh[sq * SS + 0u], SS);
        }
        if (HD > 16u) {
            coopStoreT(o1, &s_sh[sq * SS + 16u], SS);
        }
        if (HD > 32u) {
            coopStoreT(o2, &s_sh[sq * SS + 32u], SS);
        }
        if (HD > 48u) {
            coopStoreT(o3, &s_sh[sq * SS + 48u], SS);
        }
        } else {
        if (HD > 64u) {
            coopStoreT(o4, &s_sh[sq * SS + 0u], SS);
        }
        if (HD > 80u) {
            coopStoreT(o5, &s_sh[sq * SS + 16u], SS);
        }
        if (HD > 96u) {
            coopStoreT(o6, &s_sh[sq * SS + 32u], SS);
        }
        if (HD > 112u) {
            coopStoreT(o7, &s_sh[sq * SS + 48u], SS);
        }
        }
        workgroupBarrier();
        if (t < step.n_tokens) {
            for (var j = 0u; j < 32u; j++) {
                let d = g * 64u + c0 + j;
                if (d < HD) {
                    out[(t * NH + h) * HD + d] = s_sh[row * SS + c0 + j] * inv;
                }
            }
        }
    }
}
