// Sampling on the GPU: the next token drawn from the LM head's logits with a repetition penalty,
// temperature, top-k, top-p and min-p, written where greedy's argmax writes it (ids[0] for the
// next step's embedding, out[slot] for the CPU), so a sampled decode pipelines like greedy and
// reads back one id a step.
//
// Scores are the logits after OpenAI's adjustments and the repetition penalty, in the CPU
// sampler's order (sampler.rs `adjust`, then `sample`): the logit bias (a dense array in
// `state`), the frequency and presence penalties of the tokens generated so far (a count per
// token in `state`, c > 0: - c * frequency - presence), then the repetition penalty of the tokens
// in the context (a bitmask in `state`: positive / r, negative * r). With m the largest score and T the temperature, a token's
// distance is d = (m - score) / T >= 0 and its weight exp(-d). The cuts keep the tokens of the
// largest scores: top-k the K largest, top-p the fewest whose weight reaches p of the top-k
// weight, min-p those with d <= -ln(min_p). Each cut is a score threshold; ties at a threshold
// are all kept. The draw is Gumbel-max over the kept tokens: argmax(-d + g), g = -ln(-ln(u)),
// u from a hash of (seed, position, token), the same on every GPU.
//
// Phases (PHASE), one dispatch each; NW workgroups take CHUNK tokens each, or one workgroup:
//  1 max    (NW) largest score per chunk
//  2 hist   (NW) per-chunk histogram of d in 1/8-nat bins (BINS; the last takes the rest):
//                token count and weight (fixed point)
//  3 select (1)  bin totals and the bins where the top-k and top-p cuts fall
//  4 gather (NW) the tokens of the top-k bin, and of the bins the top-p cut may fall in, into
//                two lists of up to CAP
//  5 cut    (1)  each list sorted; the exact score of each cut (inside its bin)
//  6 draw   (NW) per-chunk Gumbel-max over the kept tokens
//  7 pick   (1)  the winner to ids[0] and out[slot], into the penalty set and its count
// Phases a generation's options do not need return at once. Greedy with a penalty runs 1, 6
// and 7 without noise. A list that overflows CAP keeps its whole bin(s) (a cut within 1/8 nat
// of the exact one).
//
// Bindings: 0 logits (V, read), 1 ids (next step's input), 2 out (token slots), 3 state
// (scratch, offsets OFF_* from model/sampling.rs), 4 params (uniform), 5 step (uniform),
// 6 counters (list lengths).

struct Params {
    inv_temp: f32,      // 1 / T (0 for greedy)
    top_p: f32,
    min_d: f32,         // -ln(min_p); 3.4e38 without min-p
    penalty: f32,
    top_k: u32,         // 0: no top-k
    seed_lo: u32,
    seed_hi: u32,
    flags: u32,         // 1 penalty, 2 top-k, 4 top-p, 8 greedy, 16 logit bias, 32 frequency/presence
    frequency: f32,
    presence: f32,
}

override PHASE: u32;
override V: u32;
override NW: u32;
override CAP: u32 = 512u;
override OFF_PEN: u32;     // ceil(V / 32) words: the penalty set
override OFF_CNT: u32;     // V: times each token was generated (frequency / presence penalties)
override OFF_BIAS: u32;    // V: f32 logit bias of each token
override OFF_WMAX: u32;    // NW: largest score per chunk
override OFF_HIST: u32;    // NW * BINS * 2: (count, weight) per chunk and bin
override OFF_CUM: u32;     // BINS: cumulative weight to each bin's end (phase 3)
override OFF_HDR: u32;     // 16: the cuts (below)
override OFF_LIST: u32;    // 2 * CAP * 2: (score bits, token) of the two gathered bins
override OFF_DRAW: u32;    // NW * 2: (key bits, token) per chunk

const CHUNK: u32 = 4096u;
const PER: u32 = 16u;              // CHUNK / 256 tokens per invocation
const BINS: u32 = 256u;
const BINS_PER_NAT: f32 = 8.0;
const W_UNIT: f32 = 524288.0;      // 2^19: a chunk's 4096 weights of at most 1 sum below 2^31
const NEG: f32 = -3.4e38;
const NONE: u32 = 0xffffffffu;
// Header words.
const H_M: u32 = 0u;        // largest score
const H_BK: u32 = 1u;       // top-k bin (BINS: no cut)
const H_BP: u32 = 2u;       // first bin the top-p cut may fall in (BINS: no cut)
const H_K_IN: u32 = 3u;     // tokens of the top-k bin inside the cut
const H_CK: u32 = 4u;       // weight before the top-k bin
const H_TK: u32 = 5u;       // top-k score threshold inside its bin
const H_TP: u32 = 6u;       // top-p score threshold inside its bin
const H_BP2: u32 = 7u;      // top-p bin (phase 5)
const H_BP_HI: u32 = 8u;    // last bin the top-p cut may fall in

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<storage, read_write> state: array<u32>;
@group(0) @binding(4) var<uniform> sp: Params;
@group(0) @binding(6) var<storage, read_write> counters: array<atomic<u32>, 4>;

var<workgroup> wk: array<f32, 512>;      // keys: scores, weights, scan values
var<workgroup> wi: array<u32, 512>;      // tokens, counts
var<workgroup> ws: array<f32, 512>;      // phase 5: running weights of the sorted list
var<workgroup> hc: array<atomic<u32>, 256>;
var<workgroup> hw: array<atomic<u32>, 256>;
var<workgroup> bc: array<u32, 8>;       // values made uniform with workgroupUniformLoad, one slot each
var<workgroup> zsh: f32;
// Phase 5: the first index a parallel search finds (running sums of floats may dip by an ulp,
// so more than one invocation can match; the smallest is the one a serial loop takes).
var<workgroup> first_at: atomic<u32>;

fn has(f: u32) -> bool {
    return (sp.flags & f) != 0u;
}

// Logit `l` of token i as a score: the bias, the frequency / presence penalties and the
// repetition penalty applied.
fn adjust(l: f32, i: u32) -> f32 {
    var s = l;
    if (has(16u)) {
        s += bitcast<f32>(state[OFF_BIAS + i]);
    }
    if (has(32u)) {
        let c = state[OFF_CNT + i];
        if (c > 0u) {
            s -= sp.frequency * f32(c) + sp.presence;
        }
    }
    if (has(1u) && ((state[OFF_PEN + i / 32u] >> (i % 32u)) & 1u) != 0u) {
        s = select(s * sp.penalty, s / sp.penalty, s > 0.0);
    }
    return s;
}

// This invocation's PER scores of chunk `wg` (token `token(wg, lid, e)` at e; past the
// vocabulary the last token's, which the callers skip). All PER logits are requested before any
// is used: one load's latency after another's bound the phases over the vocabulary.
fn chunk_scores(wg: u32, lid: u32) -> array<f32, PER> {
    var s: array<f32, PER>;
    for (var e = 0u; e < PER; e++) {
        s[e] = logits[min(wg * CHUNK + e * 256u + lid, V - 1u)];
    }
    if (has(1u | 16u | 32u)) {
        for (var e = 0u; e < PER; e++) {
            s[e] = adjust(s[e], min(wg * CHUNK + e * 256u + lid, V - 1u));
        }
    }
    return s;
}

fn dist(s: f32, m: f32) -> f32 {
    return (m - s) * sp.inv_temp;
}

fn bin_of(d: f32) -> u32 {
    // NaN scores land in the last bin (min of NaN is unspecified; select keeps it defined).
    return select(BINS - 1u, min(u32(d * BINS_PER_NAT), BINS - 1u), d < f32(BINS));
}

// Token `e` of this invocation's share of chunk `wg`, or NONE past the vocabulary.
fn token(wg: u32, lid: u32, e: u32) -> u32 {
    let i = wg * CHUNK + e * 256u + lid;
    return select(NONE, i, i < V);
}

// The largest score: over the per-chunk maxima of phase 1.
fn global_max(lid: u32) -> f32 {
    var m = NEG;
    for (var w = lid; w < NW; w += 256u) {
        m = max(m, bitcast<f32>(state[OFF_WMAX + w]));
    }
    wk[lid] = m;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            wk[lid] = max(wk[lid], wk[lid + s]);
        }
        workgroupBarrier();
    }
    let r = wk[0];
    workgroupBarrier();
    return r;
}

// Largest (key, token) over the workgroup, lowest token on ties; NaN never wins.
fn best_of(key: f32, tok: u32, lid: u32) -> vec2<u32> {
    wk[lid] = key;
    wi[lid] = tok;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let k = wk[lid + s];
            let t = wi[lid + s];
            if (k > wk[lid] || (k == wk[lid] && t < wi[lid])) {
                wk[lid] = k;
                wi[lid] = t;
            }
        }
        workgroupBarrier();
    }
    let r = vec2<u32>(bitcast<u32>(wk[0]), wi[0]);
    workgroupBarrier();
    return r;
}

fn hash(x: u32) -> u32 {
    var v = x;
    v ^= v >> 16u;
    v *= 0x7feb352du;
    v ^= v >> 15u;
    v *= 0x846ca68bu;
    v ^= v >> 16u;
    return v;
}

fn gumbel(key: u32, i: u32) -> f32 {
    let u = (f32(hash(i ^ key) >> 8u) + 0.5) * (1.0 / 16777216.0);
    return -log(-log(u));
}

// Phase 5: ws[j] = the weights of the sorted list's first j + 1 scores (an inclusive scan; 0 past
// its n), so that the running weights the cuts need take 9 steps instead of a loop over the list.
fn scan_weights(n: u32, m: f32, lid: u32) {
    for (var j = lid; j < 512u; j += 256u) {
        ws[j] = select(0.0, exp(-dist(wk[j], m)), j < n);
    }
    workgroupBarrier();
    for (var s = 1u; s < 512u; s <<= 1u) {
        var lo = ws[lid];
        if (lid >= s) {
            lo += ws[lid - s];
        }
        let hi = ws[lid + 256u] + ws[lid + 256u - s];
        workgroupBarrier();
        ws[lid] = lo;
        ws[lid + 256u] = hi;
        workgroupBarrier();
    }
}

// Phase 5: sort `n` (<= CAP) gathered (score, token) pairs of list `l` into wk/wi, largest score
// first, lowest token first among equal scores.
fn sort_list(l: u32, n: u32, lid: u32) {
    for (var j = lid; j < 512u; j += 256u) {
        let at = OFF_LIST + (l * CAP + j) * 2u;
        let ok = j < n;
        wk[j] = select(NEG, bitcast<f32>(state[at]), ok);
        wi[j] = select(NONE, state[at + 1u], ok);
    }
    workgroupBarrier();
    for (var k = 2u; k <= 512u; k <<= 1u) {
        for (var j = k >> 1u; j > 0u; j >>= 1u) {
            let i = 2u * j * (lid / j) + lid % j;
            let p = i + j;
            let first_before = wk[i] > wk[p] || (wk[i] == wk[p] && wi[i] < wi[p]);
            // Blocks of k alternate direction until the last pass sorts everything descending.
            let descending = (i & k) == 0u;
            if (first_before != descending) {
                let tk = wk[i];
                let ti = wi[i];
                wk[i] = wk[p];
                wi[i] = wi[p];
                wk[p] = tk;
                wi[p] = ti;
            }
            workgroupBarrier();
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x;
    let greedy = has(8u);
    let cuts = has(2u) || has(4u);
    switch PHASE {
        case 1u: {
            if (greedy) {
                return;
            }
            var m = NEG;
            let sc = chunk_scores(wg, lid);
            for (var e = 0u; e < PER; e++) {
                if (token(wg, lid, e) != NONE) {
                    m = max(m, sc[e]);
                }
            }
            let b = best_of(m, 0u, lid);
            if (lid == 0u) {
                state[OFF_WMAX + wg] = b.x;
            }
        }
        case 2u: {
            if (greedy || !cuts) {
                return;
            }
            let m = global_max(lid);
            atomicStore(&hc[lid], 0u);
            atomicStore(&hw[lid], 0u);
            workgroupBarrier();
            let sc = chunk_scores(wg, lid);
            for (var e = 0u; e < PER; e++) {
                if (token(wg, lid, e) != NONE) {
                    let d = dist(sc[e], m);
                    atomicAdd(&hc[bin_of(d)], 1u);
                    atomicAdd(&hw[bin_of(d)], u32(select(0.0, exp(-d), d >= 0.0) * W_UNIT + 0.5));
                }
            }
            workgroupBarrier();
            let at = OFF_HIST + (wg * BINS + lid) * 2u;
            state[at] = atomicLoad(&hc[lid]);
            state[at + 1u] = atomicLoad(&hw[lid]);
            if (wg == 0u && lid == 0u) {
                state[OFF_HDR + H_M] = bitcast<u32>(m);
            }
        }
        case 3u: {
            if (greedy || !cuts) {
                return;
            }
            // Bin totals over the chunks, eight chunks' loads in flight at a time (summed in
            // chunk order as one at a time would).
            var c = 0u;
            var w = 0.0;
            for (var g = 0u; g < NW; g += 8u) {
                var hcs: array<u32, 8>;
                var hws: array<u32, 8>;
                for (var k = 0u; k < 8u; k++) {
                    let at = OFF_HIST + (min(g + k, NW - 1u) * BINS + lid) * 2u;
                    hcs[k] = state[at];
                    hws[k] = state[at + 1u];
                }
                for (var k = 0u; k < 8u; k++) {
                    if (g + k < NW) {
                        c += hcs[k];
                        w += f32(hws[k]) * (1.0 / W_UNIT);
                    }
                }
            }
            // Inclusive scans over the bins, largest scores first.
            wi[lid] = c;
            wk[lid] = w;
            workgroupBarrier();
            for (var s = 1u; s < BINS; s <<= 1u) {
                var ci = wi[lid];
                var wi2 = wk[lid];
                if (lid >= s) {
                    ci += wi[lid - s];
                    wi2 += wk[lid - s];
                }
                workgroupBarrier();
                wi[lid] = ci;
                wk[lid] = wi2;
                workgroupBarrier();
            }
            state[OFF_CUM + lid] = bitcast<u32>(wk[lid]);
            let k = select(V, min(sp.top_k, V), has(2u));
            let k_cut = has(2u) && k < V;
            // The first bin whose running count reaches k.
            if (k_cut && wi[lid] >= k && (lid == 0u || wi[lid - 1u] < k)) {
                bc[0] = lid;
            }
            if (lid == 0u && !k_cut) {
                bc[0] = BINS;
            }
            let bk = workgroupUniformLoad(&bc[0]);
            // The top-p cut falls where the running weight reaches p of the top-k weight, which
            // lies between the weight before the top-k bin and the weight through it.
            let zhi = wk[min(bk, BINS - 1u)];
            let zlo = select(zhi, select(0.0, wk[max(bk, 1u) - 1u], bk > 0u), bk < BINS);
            let p_cut = has(4u) && sp.top_p < 1.0;
            let lo = sp.top_p * zlo;
            let hi = sp.top_p * zhi;
            if (p_cut && wk[lid] >= lo && (lid == 0u || wk[lid - 1u] < lo)) {
                bc[1] = lid;
            }
            if (p_cut && wk[lid] >= hi && (lid == 0u || wk[lid - 1u] < hi)) {
                bc[2] = lid;
            }
            if (lid == 0u && !p_cut) {
                bc[1] = BINS;
                bc[2] = BINS;
            }
            // A running weight that never reaches the goal (rounding): the top-k bin.
            if (lid == 0u && p_cut && wk[BINS - 1u] < hi) {
                bc[2] = min(bk, BINS - 1u);
            }
            if (lid == 0u && p_cut && wk[BINS - 1u] < lo) {
                bc[1] = min(bk, BINS - 1u);
            }
            let bp = workgroupUniformLoad(&bc[1]);
            let bp_hi = workgroupUniformLoad(&bc[2]);
            if (lid == 0u) {
                state[OFF_HDR + H_BK] = bk;
                state[OFF_HDR + H_BP] = bp;
                state[OFF_HDR + H_BP_HI] = bp_hi;
                if (bk < BINS) {
                    let prev = max(bk, 1u) - 1u;
                    state[OFF_HDR + H_K_IN] = k - select(0u, wi[prev], bk > 0u);
                    state[OFF_HDR + H_CK] = bitcast<u32>(select(0.0, wk[prev], bk > 0u));
                }
                atomicStore(&counters[0], 0u);
                atomicStore(&counters[1], 0u);
            }
        }
        case 4u: {
            if (greedy || !cuts) {
                return;
            }
            let m = bitcast<f32>(state[OFF_HDR + H_M]);
            let bk = state[OFF_HDR + H_BK];
            let bp = state[OFF_HDR + H_BP];
            let bp_hi = state[OFF_HDR + H_BP_HI];
            let sc = chunk_scores(wg, lid);
            for (var e = 0u; e < PER; e++) {
                let i = token(wg, lid, e);
                if (i != NONE) {
                    let s = sc[e];
                    let b = bin_of(dist(s, m));
                    var l = NONE;
                    if (b == bk) {
                        l = 0u;
                    } else if (b >= bp && b <= bp_hi) {
                        l = 1u;
                    }
                    if (l != NONE) {
                        let n = atomicAdd(&counters[l], 1u);
                        if (n < CAP) {
                            let at = OFF_LIST + (l * CAP + n) * 2u;
                            state[at] = bitcast<u32>(s);
                            state[at + 1u] = i;
                        }
                    }
                }
            }
        }
        case 5u: {
            if (greedy || !cuts) {
                return;
            }
            let m = bitcast<f32>(state[OFF_HDR + H_M]);
            if (lid == 0u) {
                bc[0] = state[OFF_HDR + H_BK];
                bc[1] = state[OFF_HDR + H_BP];
                bc[2] = atomicLoad(&counters[0]);
                bc[3] = atomicLoad(&counters[1]);
                bc[5] = state[OFF_HDR + H_BP_HI];
            }
            let bk = workgroupUniformLoad(&bc[0]);
            let bp = workgroupUniformLoad(&bc[1]);
            let bp_hi = workgroupUniformLoad(&bc[5]);
            let n0 = workgroupUniformLoad(&bc[2]);
            let n1 = workgroupUniformLoad(&bc[3]);
            // Top-k: the k_in-th largest score of its bin; the exact top-k weight with it.
            if (lid == 0u) {
                zsh = bitcast<f32>(state[OFF_CUM + min(bk, BINS - 1u)]);
            }
            if (bk < BINS) {
                if (n0 <= CAP) {
                    sort_list(0u, n0, lid);
                    scan_weights(n0, m, lid);
                    if (lid == 0u) {
                        let k_in = min(state[OFF_HDR + H_K_IN], n0);
                        zsh = bitcast<f32>(state[OFF_HDR + H_CK]) + select(0.0, ws[max(k_in, 1u) - 1u], k_in > 0u);
                        state[OFF_HDR + H_TK] = bitcast<u32>(wk[max(k_in, 1u) - 1u]);
                    }
                } else if (lid == 0u) {
                    state[OFF_HDR + H_TK] = bitcast<u32>(NEG);
                }
            }
            // Top-p: its exact bin from the exact top-k weight (the first bin whose running
            // weight reaches p of it; the last where rounding leaves all short), then the score
            // where the running weight reaches it, in the list that holds that bin.
            let goal = sp.top_p * workgroupUniformLoad(&zsh);
            if (lid == 0u) {
                atomicStore(&first_at, BINS - 1u);
            }
            workgroupBarrier();
            let cum = bitcast<f32>(state[OFF_CUM + lid]);
            let before = bitcast<f32>(state[OFF_CUM + max(lid, 1u) - 1u]);
            if (cum >= goal && (lid == 0u || before < goal)) {
                atomicMin(&first_at, lid);
            }
            workgroupBarrier();
            if (lid == 0u) {
                bc[6] = atomicLoad(&first_at);
            }
            let b = select(BINS, min(workgroupUniformLoad(&bc[6]), min(bk, BINS - 1u)), bp < BINS);
            var l = 2u;
            var n = 0u;
            if (b < BINS && b == bk) {
                l = 0u;
                n = n0;
            } else if (b < BINS && b >= bp && b <= bp_hi) {
                l = 1u;
                n = n1;
            }
            if (b >= BINS || l == 2u || n > CAP) {
                if (lid == 0u) {
                    state[OFF_HDR + H_BP2] = b;
                    state[OFF_HDR + H_TP] = bitcast<u32>(NEG);
                }
                return;
            }
            // List 0 is still sorted in wk/wi and scanned in ws when the cut falls in the top-k bin.
            if (l == 1u) {
                sort_list(1u, n, lid);
                scan_weights(n, m, lid);
            }
            // The weight before the list's first bin.
            let first = select(bp, b, l == 0u);
            let acc = select(0.0, bitcast<f32>(state[OFF_CUM + max(first, 1u) - 1u]), first > 0u);
            var last = n;
            if (l == 0u) {
                last = min(n, max(state[OFF_HDR + H_K_IN], 1u));
            }
            // The first listed score whose running weight reaches the goal, else the last one.
            if (lid == 0u) {
                atomicStore(&first_at, max(last, 1u) - 1u);
            }
            workgroupBarrier();
            for (var j = lid; j < last; j += 256u) {
                if (acc + ws[j] >= goal && (j == 0u || acc + ws[j - 1u] < goal)) {
                    atomicMin(&first_at, j);
                }
            }
            workgroupBarrier();
            if (lid == 0u) {
                bc[7] = atomicLoad(&first_at);
            }
            let jt = workgroupUniformLoad(&bc[7]);
            if (lid == 0u) {
                state[OFF_HDR + H_BP2] = b;
                state[OFF_HDR + H_TP] = bitcast<u32>(wk[jt]);
            }
        }
        case 6u: {
            var m = 0.0;
            if (!greedy) {
                m = global_max(lid);
            }
            var bk = BINS;
            var bp = BINS;
            var tk = NEG;
            var tp = NEG;
            if (!greedy && cuts) {
                bk = state[OFF_HDR + H_BK];
                bp = state[OFF_HDR + H_BP2];
                tk = bitcast<f32>(state[OFF_HDR + H_TK]);
                tp = bitcast<f32>(state[OFF_HDR + H_TP]);
            }
            let key = hash(sp.seed_lo ^ hash(sp.seed_hi ^ hash(step.pos0 + 0x9e3779b9u)));
            var best = NEG;
            var best_i = NONE;
            let sc = chunk_scores(wg, lid);
            for (var e = 0u; e < PER; e++) {
                let i = token(wg, lid, e);
                if (i != NONE) {
                    let s = sc[e];
                    var k = s;
                    var kept = s == s;
                    if (!greedy) {
                        let d = dist(s, m);
                        let b = bin_of(d);
                        kept = kept && d <= sp.min_d && (b < bk || (b == bk && s >= tk)) && (b < bp || (b == bp && s >= tp));
                        k = -d + gumbel(key, i);
                    }
                    if (kept && (k > best || best_i == NONE)) {
                        best = k;
                        best_i = i;
                    }
                }
            }
            let r = best_of(select(NEG, best, best_i != NONE), best_i, lid);
            if (lid == 0u) {
                state[OFF_DRAW + 2u * wg] = r.x;
                state[OFF_DRAW + 2u * wg + 1u] = r.y;
            }
        }
        default: {
            var best = NEG;
            var best_i = NONE;
            for (var w = lid; w < NW; w += 256u) {
                let k = bitcast<f32>(state[OFF_DRAW + 2u * w]);
                let t = state[OFF_DRAW + 2u * w + 1u];
                if (t != NONE && (best_i == NONE || k > best || (k == best && t < best_i))) {
                    best = k;
                    best_i = t;
                }
            }
            let r = best_of(best, best_i, lid);
            if (lid == 0u) {
                let tok = r.y;
                // Nothing kept (every score NaN): an id the engine refuses, and a valid input.
                ids[0] = select(0u, tok, tok < V);
                out[step.slot] = select(V, tok, tok < V);
                if (has(1u) && tok < V) {
                    state[OFF_PEN + tok / 32u] |= 1u << (tok % 32u);
                }
                if (has(32u) && tok < V) {
                    state[OFF_CNT + tok] += 1u;
                }
            }
        }
    }
}
