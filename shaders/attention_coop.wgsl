// Prefill attention on the matrix units (cooperative matrices, like matmul_coop.wgsl), for full
// (not sliding) layers with HD a multiple of 16 up to 128 and caches of a multiple of 64 slots.
// One workgroup per (query head, 64 queries): four 32-wide subgroups, each owning 16 queries,
// their Q fragments held in registers. Q·Kᵀ and P·V are 16x16 f16 products accumulated in f32.
// Each 64-key chunk of K, then of V, is staged once in workgroup memory for the four subgroups
// (matrix loads straight from the cache, each subgroup its own, were the slow part: matrix
// loads from storage buffers are slow on the H100's driver: BENCHMARKS.md sessions 11 and 13).
// Two sweeps over the keys instead of an online softmax: the rescaling an online softmax needs
// cannot be applied to a cooperative matrix, so sweep 0 finds each query's max and sum and sweep
// 1 accumulates exp(s - max) · V, dividing by the sum at the end; the second Q·Kᵀ costs less
// than moving the output through memory every chunk. Same constants as attention.wgsl (WINDOW
// must be 0). Keys past the last allowed one get probability 0; their cache slots hold earlier
// finite values or zeros.
// Key splits: workgroup z takes keys z KSPL .. (z + 1) KSPL of the cache (KSPL a multiple of
// 64). With one split it writes the output; with several it writes its unnormalized output and
// each query's (max, sum) to `part` for attn_prefill_merge.wgsl, so a long cache is swept by
// several workgroups instead of one per 64 queries and head.
// Dispatch: (NH, ceil(tokens / 64), ceil((pos0 + tokens) / KSPL)).

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
override KSPL: u32 = 1073741824u;
override PSTATS: u32 = 0u;   // where the (max, sum) pairs start in `part`, in floats

@group(0) @binding(0) var<storage, read> q: array<f32>;
// The layer's KV buffer, K half then V half (also bound at 2, which attention.wgsl reads V through).
@group(0) @binding(1) var<storage, read> kv: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
// Split z's outputs [z][token][head][HD], then from PSTATS its (max, sum) [z][token][head].
@group(0) @binding(4) var<storage, read_write> part: array<f32>;

const QB: u32 = 64u;    // queries a workgroup
const KC: u32 = 64u;    // keys a chunk
// Row strides: 16 bytes past a multiple of 128 so the rows a matrix load reads spread over the
// banks (matmul_coop_wide.wgsl).
const KS: u32 = 136u;   // f16, HD <= 128
const SS: u32 = 68u;    // f32
const PS: u32 = 72u;    // f16

var<workgroup> kv_h: array<vec4<f16>, 2176>;  // [KC][KS] halves in fours: first the scaled queries, then each chunk's K or V
var<workgroup> s_sh: array<f32, 4352>;        // [QB][SS]: a chunk's scores, later the output
var<workgroup> p_h: array<f16, 4608>;         // [QB][PS]: a chunk's probabilities
var<workgroup> stats: array<vec2<f32>, 128>;

// Keys (or values) kc .. kc + 63 of the cache half at `base` (in halves) into kv_h.
fn stage(base: u32, kc: u32, lid: u32) {
    let per_row = HD / 4u;
    for (var i = lid; i < KC * per_row; i += 128u) {
        let r = i / per_row;
        let c = i % per_row;
        kv_h[r * (KS / 4u) + c] = kv[(base + (kc + r) * HD) / 4u + c];
    }
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
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wg.x;
    // The last query blocks first: under a causal mask they read the most keys, and the GPU
    // starts workgroups in order, so the short ones fill in at the end (H100 pp512: 1B 1.35 ->
    // 1.18 ms, Phi-3 3.38 -> 2.95; SmolLM2, whose 72 workgroups all start at once, unchanged).
    let t0 = (nwg.y - 1u - wg.y) * QB;
    let kvh = h / (NH / NKV);
    let sq = (lid / 32u) * 16u;
    let lane = lid % 32u;
    let per_row = HD / 4u;
    for (var i = lid; i < QB * per_row; i += 128u) {
        let r = i / per_row;
        let c = i % per_row;
        var v = vec4<f32>(0.0);
        if (t0 + r < step.n_tokens) {
            let at = (t0 + r) * QSTRIDE + h * HD + c * 4u;
            v = vec4<f32>(q[at], q[at + 1u], q[at + 2u], q[at + 3u]) * SCALE;
        }
        kv_h[r * (KS / 4u) + c] = vec4<f16>(v);
    }
    workgroupBarrier();
    // The subgroup's queries, 16 dimensions a fragment.
    let qa = sq * (KS / 4u);
    var q0 = coop_mat16x16<f16, A>();
    var q1 = coop_mat16x16<f16, A>();
    var q2 = coop_mat16x16<f16, A>();
    var q3 = coop_mat16x16<f16, A>();
    var q4 = coop_mat16x16<f16, A>();
    var q5 = coop_mat16x16<f16, A>();
    var q6 = coop_mat16x16<f16, A>();
    var q7 = coop_mat16x16<f16, A>();
    q0 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa], KS / 4u);
    if (HD > 16u) {
        q1 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa + 4u], KS / 4u);
    }
    if (HD > 32u) {
        q2 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa + 8u], KS / 4u);
    }
    if (HD > 48u) {
        q3 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa + 12u], KS / 4u);
    }
    if (HD > 64u) {
        q4 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa + 16u], KS / 4u);
    }
    if (HD > 80u) {
        q5 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa + 20u], KS / 4u);
    }
    if (HD > 96u) {
        q6 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa + 24u], KS / 4u);
    }
    if (HD > 112u) {
        q7 = coopLoadT<coop_mat16x16<f16, A>>(&kv_h[qa + 28u], KS / 4u);
    }
    var end = step.pos0 + min(t0 + QB, step.n_tokens);
    if (!CAUSAL) {
        end = step.pos0 + step.n_tokens;
    }
    // This split's keys; `end` stays the mask's bound.
    let k_lo = wg.z * KSPL;
    let k_hi = min(end, k_lo + KSPL);
    let kbase = kvh * CAP * HD;
    let vbase = NKV * CAP * HD + kbase;
    // Lane pairs own a query row: this lane columns c0 .. c0 + 31 of each chunk.
    let row = sq + lane / 2u;
    let qpos = step.pos0 + t0 + row;
    let c0 = (lane % 2u) * 32u;
    var m = -3.0e38;
    var l = 0.0;
    var mx = 0.0;
    var o0 = coop_mat16x16<f32, C>();
    var o1 = coop_mat16x16<f32, C>();
    var o2 = coop_mat16x16<f32, C>();
    var o3 = coop_mat16x16<f32, C>();
    var o4 = coop_mat16x16<f32, C>();
    var o5 = coop_mat16x16<f32, C>();
    var o6 = coop_mat16x16<f32, C>();
    var o7 = coop_mat16x16<f32, C>();
    for (var sweep = 0u; sweep < 2u; sweep++) {
        for (var kc = k_lo; kc < k_hi; kc += KC) {
            // kv_h is free: the queries' or the last chunk's values were read before the
            // barrier that ended the previous iteration.
            workgroupBarrier();
            stage(kbase, kc, lid);
            workgroupBarrier();
            var s0 = coop_mat16x16<f32, C>();
            var s1 = coop_mat16x16<f32, C>();
            var s2 = coop_mat16x16<f32, C>();
            var s3 = coop_mat16x16<f32, C>();
            for (var d = 0u; d < HD; d += 16u) {
                var a = q0;
                switch (d / 16u) {
                    case 1u: { a = q1; }
                    case 2u: { a = q2; }
                    case 3u: { a = q3; }
                    case 4u: { a = q4; }
                    case 5u: { a = q5; }
                    case 6u: { a = q6; }
                    case 7u: { a = q7; }
                    default: {}
                }
                let kd = d / 4u;
                s0 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&kv_h[kd], KS / 4u), s0);
                s1 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&kv_h[16u * (KS / 4u) + kd], KS / 4u), s1);
                s2 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&kv_h[32u * (KS / 4u) + kd], KS / 4u), s2);
                s3 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&kv_h[48u * (KS / 4u) + kd], KS / 4u), s3);
            }
            // Each subgroup writes and then reads only its own 16 rows of s_sh.
            coopStoreT(s0, &s_sh[sq * SS], SS);
            coopStoreT(s1, &s_sh[sq * SS + 16u], SS);
            coopStoreT(s2, &s_sh[sq * SS + 32u], SS);
            coopStoreT(s3, &s_sh[sq * SS + 48u], SS);
            workgroupBarrier();
            if (sweep == 0u) {
                for (var j = 0u; j < 32u; j++) {
                    let sc = score(row, c0 + j, kc + c0 + j, qpos, end);
                    let mn = max(m, sc);
                    l = l * exp(m - mn) + exp(sc - mn);
                    m = mn;
                }
                continue;
            }
            for (var j = 0u; j < 32u; j++) {
                p_h[row * PS + c0 + j] = f16(exp(score(row, c0 + j, kc + c0 + j, qpos, end) - mx));
            }
            stage(vbase, kc, lid);
            workgroupBarrier();
            for (var kk = 0u; kk < KC; kk += 16u) {
                let a = coopLoadT<coop_mat16x16<f16, A>>(&p_h[sq * PS + kk], PS);
                let vrow = kk * (KS / 4u);
                o0 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow], KS / 4u), o0);
                if (HD > 16u) {
                    o1 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow + 4u], KS / 4u), o1);
                }
                if (HD > 32u) {
                    o2 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow + 8u], KS / 4u), o2);
                }
                if (HD > 48u) {
                    o3 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow + 12u], KS / 4u), o3);
                }
                if (HD > 64u) {
                    o4 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow + 16u], KS / 4u), o4);
                }
                if (HD > 80u) {
                    o5 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow + 20u], KS / 4u), o5);
                }
                if (HD > 96u) {
                    o6 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow + 24u], KS / 4u), o6);
                }
                if (HD > 112u) {
                    o7 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&kv_h[vrow + 28u], KS / 4u), o7);
                }
            }
        }
        if (sweep == 0u) {
            stats[lid] = vec2<f32>(m, l);
            workgroupBarrier();
            let other = stats[lid ^ 1u];
            mx = max(m, other.x);
            l = l * exp(m - mx) + other.y * exp(other.x - mx);
        }
    }

    // The output in groups of 64 dimensions through the subgroup's rows of s_sh: normalized,
    // or with several splits as it is, beside the row's (max, sum). A split past this block's
    // last key leaves (-3e38, 0), which the merge weighs by 0.
    let t = t0 + row;
    let split = nwg.z > 1u;
    var inv = 1.0 / l;
    if (split) {
        inv = 1.0;
        if (t < step.n_tokens && lane % 2u == 0u) {
            let at = PSTATS + 2u * ((wg.z * step.n_tokens + t) * NH + h);
            part[at] = mx;
            part[at + 1u] = l;
        }
    }
    for (var g = 0u; g * 64u < HD; g++) {
        workgroupBarrier();
        if (g == 0u) {
            coopStoreT(o0, &s_sh[sq * SS + 0u], SS);
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
                    let v = s_sh[row * SS + c0 + j] * inv;
                    if (split) {
                        part[((wg.z * step.n_tokens + t) * NH + h) * HD + d] = v;
                    } else {
                        out[(t * NH + h) * HD + d] = v;
                    }
                }
            }
        }
    }
}
