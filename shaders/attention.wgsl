// Grouped-query prefill attention over the KV cache without matrix units: causal, or (CAUSAL
// false, encoders such as EmbeddingGemma) over every token of the step.
//
// One workgroup takes a block of R = GH * QB query rows that share a KV head: GH of its query
// heads times QB consecutive tokens. Keys and values are read once per block instead of once
// per query row (the kernel this replaced, one workgroup per head and token, read the cache
// R times over and was load-bound: 7.2 ms of a 512-token step of the Llama-3.2-1B shape in
// Chromium on the H100, against 1.2 ms natively on matrix units). Keys are visited in chunks of
// CH with an online softmax (running max and sum per row), so the context length is bounded
// only by the cache, not by workgroup memory.
//
// Per chunk: invocation (j, quarter) scores key j against a quarter of the R rows (the key in
// registers, the queries broadcast from workgroup memory); the rows' maxima come from a
// two-level reduction; then invocation (row group g, value word w) accumulates its rows'
// weighted values. 256 invocations a block, each with a few rows: a first version with 64
// invocations, all rows each, kept too few warps in flight on small models (SmolLM2's 9 heads:
// 309 workgroups for 512 tokens; 4.8 -> 7.4 ms a step in Chromium on the H100).

override HD: u32;
override NH: u32;
override NKV: u32;
override CTX: u32;
override CAP: u32;            // cache slots per KV head: position p lives in slot p % CAP
override SCALE: f32;
override SOFTCAP: f32 = 0.0;   // 0: off; else scores = SOFTCAP * tanh(scores / SOFTCAP)
override WINDOW: u32 = 0u;     // 0: no window; else keys less than WINDOW positions away
override CAUSAL: bool = true;  // false: keys after the query too (the step holds the whole input)
override QSTRIDE: u32;        // floats between tokens' q rows (q sits first in each [q; k; v] row)
override GH: u32;             // query heads of a block: a divisor of NH / NKV
override QB: u32;             // tokens of a block; GH * QB <= RMAX
override QS_LEN: u32;         // GH * QB * HD / 4
override PS_LEN: u32;         // GH * QB * CH
override I8_OUT: bool = false; // the output only as the 8-bit matmul reads it; HD a multiple of 32

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<vec4<u32>>;  // the layer's KV buffer, k half
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;        // the same buffer, v half
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read_write> out8: array<u32>;         // I8_OUT: the planes
@group(0) @binding(6) var<storage, read_write> out8s: array<vec2<f32>>;  // I8_OUT: (d, sum) a block

const CH: u32 = 64u;     // keys a chunk
const WG: u32 = 256u;
const RMAX: u32 = 16u;   // query rows a block at most
const KP: u32 = 16u;     // key pieces (eight values each) requested at once
const NEG: f32 = -3.0e38;

var<workgroup> q_sh: array<vec4<f32>, QS_LEN>;   // [row][HD / 4], times SCALE
var<workgroup> p_sh: array<f32, PS_LEN>;         // [row][key]: scores, then probabilities
var<workgroup> red_sh: array<f32, WG>;
var<workgroup> m_sh: array<f32, RMAX>;           // each row's running max
var<workgroup> c_sh: array<f32, RMAX>;           // each row's rescale for this chunk

// Keys row r may see: [start, end), and whether the row is a token of this step at all.
struct Span {
    start: u32,
    end: u32,
    live: bool,
}

fn span(t: u32) -> Span {
    let pos = step.pos0 + t;
    var end = pos + 1u;
    if (!CAUSAL) {
        end = step.pos0 + step.n_tokens;
        if (WINDOW > 0u) {
            end = min(end, pos + WINDOW);
        }
    }
    var start = 0u;
    if (WINDOW > 0u && pos + 1u > WINDOW) {
        start = pos + 1u - WINDOW;
    }
    return Span(start, end, t < step.n_tokens);
}

// Value word w of key i of the chunk at c (0 past the chunk's n keys; the load itself is
// unconditional, so that a chunk's loads are all in flight together).
fn vw(c: u32, i: u32, n: u32, w: u32, kv_row0: u32) -> u32 {
    let words = HD / 2u;
    return select(0u, v_cache[NKV * CAP * words + (kv_row0 + (c + i) % CAP) * words + w], i < n);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) num_wg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let R = GH * QB;
    let groups = NH / NKV / GH;   // blocks of query heads per KV head
    let kvh = wg.x / groups;
    let h0 = kvh * (NH / NKV) + (wg.x % groups) * GH;
    // The last token blocks sweep the most keys: they take the first workgroups, so that the
    // short ones fill in behind them instead of the long ones running alone at the end.
    let t0 = (num_wg.y - 1u - wg.y) * QB;
    if (t0 >= step.n_tokens) {
        return;
    }
    let t_last = min(t0 + QB, step.n_tokens) - 1u;
    // Spans grow with the token: the block's keys run from its first token's start to its last
    // token's end.
    let lo = span(t0).start;
    let hi = span(t_last).end;

    let hd4 = HD / 4u;
    for (var i = tid; i < R * hd4; i += WG) {
        let r = i / hd4;
        let t = min(t0 + r / GH, step.n_tokens - 1u);
        let b = t * QSTRIDE + (h0 + r % GH) * HD + 4u * (i % hd4);
        q_sh[i] = vec4<f32>(q[b], q[b + 1u], q[b + 2u], q[b + 3u]) * SCALE;
    }
    if (tid < RMAX) {
        m_sh[tid] = NEG;
    }

    let words = HD / 2u;
    let kv_row0 = kvh * CAP;
    let n4 = words / 4u;
    // Scoring: key kj of the chunk, rows rq, rq + 4, ...
    let kj = tid % CH;
    let rq = tid / CH;
    // Value phase: `words` invocations a row group, each holding value word w of rows g, g + RG, ...
    let rg = WG / words;
    let g = tid / words;
    let w = tid % words;
    let nr = (R + rg - 1u) / rg;
    var acc: array<vec2<f32>, 4>;   // nr <= 4 (the host sizes R so)
    var l: array<f32, 4>;
    for (var a = 0u; a < 4u; a++) {
        acc[a] = vec2<f32>(0.0);
        l[a] = 0.0;
    }
    workgroupBarrier();

    for (var c = lo; c < hi; c += CH) {
        let j = c + kj;
        var d = vec4<f32>(0.0);   // rows rq + 4i
        let nq = (R + 3u) / 4u;   // rows rq + 4i past R: none to score
        if (j < hi) {
            let kb = (kv_row0 + j % CAP) * n4;
            // The key's pieces are all requested before any is used, KP at a time: a loop that
            // consumes each load as it comes waits one memory latency per piece. Loops counted to
            // constants, so that Chromium's range analysis proves the workgroup and vector
            // indices in range and leaves out their clamps (this kernel took 0.61x the time with
            // the browser's clamps off, H200).
            for (var b0 = 0u; b0 < HD / 8u; b0 += KP) {
                var kp: array<vec4<u32>, KP>;
                for (var i = 0u; i < KP; i++) {
                    if (b0 + i < HD / 8u) {
                        kp[i] = k_cache[kb + b0 + i];
                    }
                }
                for (var i = 0u; i < KP; i++) {
                    if (b0 + i >= HD / 8u) {
                        break;
                    }
                    let kw = kp[i];
                    let k0 = vec4<f32>(unpack2x16float(kw.x), unpack2x16float(kw.y));
                    let k1 = vec4<f32>(unpack2x16float(kw.z), unpack2x16float(kw.w));
                    for (var ri = 0u; ri < 4u; ri++) {
                        if (ri < nq) {
                            let r = min(rq + 4u * ri, R - 1u);
                            let qi = min(r * hd4 + 2u * (b0 + i), QS_LEN - 2u);
                            d[ri] += dot(q_sh[qi], k0) + dot(q_sh[qi + 1u], k1);
                        }
                    }
                }
            }
        }
        for (var ri = 0u; ri < 4u; ri++) {
            let r = rq + 4u * ri;
            let sp = span(t0 + r / GH);
            var s = NEG;
            if (r < R && sp.live && j >= sp.start && j < sp.end) {
                s = d[ri];
                if (SOFTCAP > 0.0) {
                    s = SOFTCAP * tanh(s / SOFTCAP);
                }
            }
            d[ri] = s;
            if (r < R) {
                p_sh[r * CH + kj] = s;
            }
        }
        workgroupBarrier();
        // Row maxima: sixteen invocations a row take 4 keys each, then one finishes the row.
        let rr = tid / 16u;
        var cm = NEG;
        if (rr < R) {
            let b = rr * CH + (tid % 16u) * 4u;
            cm = max(max(p_sh[b], p_sh[b + 1u]), max(p_sh[b + 2u], p_sh[b + 3u]));
        }
        red_sh[tid] = cm;
        workgroupBarrier();
        if (tid < R) {
            var m16 = NEG;
            for (var i = 0u; i < 16u; i++) {
                m16 = max(m16, red_sh[16u * tid + i]);
            }
            let old = m_sh[tid];
            let mn = max(old, m16);
            c_sh[tid] = exp(old - mn);
            m_sh[tid] = mn;
        }
        workgroupBarrier();
        for (var ri = 0u; ri < 4u; ri++) {
            let r = rq + 4u * ri;
            if (r < R) {
                // Keys a row may not see weigh exactly 0, also while its max is still NEG.
                p_sh[r * CH + kj] = select(0.0, exp(d[ri] - m_sh[r]), d[ri] > -1.0e38);
            }
        }
        workgroupBarrier();

        if (g < rg) {
            for (var ri = 0u; ri < 4u; ri++) {
                if (ri < nr) {
                    let cr = c_sh[min(g + ri * rg, R - 1u)];
                    l[ri] *= cr;
                    acc[ri] *= cr;
                }
            }
            let n = min(CH, hi - c);
            // Sixteen keys' value words are requested before any is used: a loop that consumes
            // each load right away waits one memory latency per key.
            for (var hx = 0u; hx < CH / 16u; hx++) {
                let i0 = 16u * hx;
                if (i0 >= n) {
                    break;
                }
                let va = vec4<u32>(vw(c, i0, n, w, kv_row0), vw(c, i0 + 1u, n, w, kv_row0),
                                   vw(c, i0 + 2u, n, w, kv_row0), vw(c, i0 + 3u, n, w, kv_row0));
                let vb = vec4<u32>(vw(c, i0 + 4u, n, w, kv_row0), vw(c, i0 + 5u, n, w, kv_row0),
                                   vw(c, i0 + 6u, n, w, kv_row0), vw(c, i0 + 7u, n, w, kv_row0));
                let vc = vec4<u32>(vw(c, i0 + 8u, n, w, kv_row0), vw(c, i0 + 9u, n, w, kv_row0),
                                   vw(c, i0 + 10u, n, w, kv_row0), vw(c, i0 + 11u, n, w, kv_row0));
                let vd = vec4<u32>(vw(c, i0 + 12u, n, w, kv_row0), vw(c, i0 + 13u, n, w, kv_row0),
                                   vw(c, i0 + 14u, n, w, kv_row0), vw(c, i0 + 15u, n, w, kv_row0));
                for (var ri = 0u; ri < 4u; ri++) {
                    if (ri >= nr) {
                        continue;
                    }
                    // Keys past n weigh 0 (scored NEG) and their value words read as 0.
                    let b = min(g + ri * rg, R - 1u) * CH + i0;
                    let p0 = vec4<f32>(p_sh[b], p_sh[b + 1u], p_sh[b + 2u], p_sh[b + 3u]);
                    let p1 = vec4<f32>(p_sh[b + 4u], p_sh[b + 5u], p_sh[b + 6u], p_sh[b + 7u]);
                    let p2 = vec4<f32>(p_sh[b + 8u], p_sh[b + 9u], p_sh[b + 10u], p_sh[b + 11u]);
                    let p3 = vec4<f32>(p_sh[b + 12u], p_sh[b + 13u], p_sh[b + 14u], p_sh[b + 15u]);
                    l[ri] += dot(p0 + p1 + p2 + p3, vec4<f32>(1.0));
                    acc[ri] += p0.x * unpack2x16float(va.x) + p0.y * unpack2x16float(va.y) +
                               p0.z * unpack2x16float(va.z) + p0.w * unpack2x16float(va.w) +
                               p1.x * unpack2x16float(vb.x) + p1.y * unpack2x16float(vb.y) +
                               p1.z * unpack2x16float(vb.z) + p1.w * unpack2x16float(vb.w) +
                               p2.x * unpack2x16float(vc.x) + p2.y * unpack2x16float(vc.y) +
                               p2.z * unpack2x16float(vc.z) + p2.w * unpack2x16float(vc.w) +
                               p3.x * unpack2x16float(vd.x) + p3.y * unpack2x16float(vd.y) +
                               p3.z * unpack2x16float(vd.z) + p3.w * unpack2x16float(vd.w);
                }
            }
        }
        workgroupBarrier();
    }

    if (I8_OUT) {
        write_i8(t0, h0, acc, l, g, rg, w, tid);
        return;
    }
    if (g < rg) {
        for (var ri = 0u; ri < 4u; ri++) {
            let r = g + ri * rg;
            let t = t0 + r / GH;
            if (r < R && t < step.n_tokens) {
                let o = acc[ri] * select(0.0, 1.0 / l[ri], l[ri] > 0.0);
                let ob = (t * NH + h0 + r % GH) * HD;
                out[ob + 2u * w] = o.x;
                out[ob + 2u * w + 1u] = o.y;
            }
        }
    }
}

// The block's output rows as the output projection's 8-bit kernel reads them (quant_block.wgsl),
// which spares that matmul a conversion pass over the whole step. The rows go through workgroup
// memory (q_sh, free once the keys are done) so that eight neighbouring invocations hold a
// 32-value block: a head's HD values of a token are whole blocks of the projection's input row.
fn write_i8(t0: u32, h0: u32, acc: array<vec2<f32>, 4>, l: array<f32, 4>, g: u32, rg: u32, w: u32,
            tid: u32) {
    let R = GH * QB;
    let hd4 = HD / 4u;
    // Value words 2k and 2k + 1 are the two halves of q_sh's vec4 k: written in two rounds, as
    // a component store may rewrite the whole vector (Metal's compiler does).
    for (var half = 0u; half < 2u; half++) {
        if (g < rg && w % 2u == half) {
            for (var ri = 0u; ri < 4u; ri++) {
                let r = g + ri * rg;
                if (r < R) {
                    let o = acc[ri] * select(0.0, 1.0 / l[ri], l[ri] > 0.0);
                    let qi = min(r * hd4 + w / 2u, QS_LEN - 1u);
                    q_sh[qi][2u * half] = o.x;
                    q_sh[qi][2u * half + 1u] = o.y;
                }
            }
        }
        workgroupBarrier();
    }
    let nv = R * hd4;
    // A trip count the same for every invocation: quant_part's barriers.
    for (var i0 = 0u; i0 < nv; i0 += WG) {
        let i = i0 + tid;
        let p = quant_part(q_sh[min(i, nv - 1u)], tid);
        let r = i / hd4;
        let t = t0 + r / GH;
        if (i < nv && t < step.n_tokens) {
            let e = (t * NH + h0 + r % GH) * HD + 4u * (i % hd4);
            let b = e / 32u;
            let part = (e / 4u) % 8u;
            let pw = plane_words(b, part);
            out8[pw.x] = p.c;
            out8[pw.y] = p.f;
            if (part == 0u) {
                out8s[b] = p.ds;
            }
        }
    }
}
