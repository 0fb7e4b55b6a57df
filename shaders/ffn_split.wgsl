// Decode: a small model's whole FFN in one dispatch, split over its width. Workgroup j takes the
// FFN units [j C, (j + 1) C): their gate and up rows times the normalized x, the GLU, then the
// down projection's columns of those units times the C activations: a partial of the FFN's
// output, stored at x[K (1 + j) ..]. The next layer's q/k/v and output projection add the
// partials as they read x (rowdot.wgsl XP, matvec.wgsl YP), so the FFN costs one dispatch
// instead of two; forward.rs says where that pays.
// Such FFNs are small enough that latency, not bandwidth, sets their time: every invocation
// requests all its weights of both products first (neither depends on x), so the kernel waits
// for memory about once. Quantized layouts only (32-element chunks).

override K: u32;               // hidden size: gate and up rows' length, down's rows
override FF: u32;              // FFN width: down's rows' length
override C: u32;               // FFN units a workgroup: WG / LP / 2
override LP: u32;              // invocations a gate or up row
override CPL: u32;             // chunks an invocation of a gate or up row: ceil(K / 32 / LP) <= PMAX
override RPL: u32;             // down rows an invocation: ceil(K / WG), RPL * C / 32 <= DMAX
override EPS: f32 = 1e-5;
override NW_OFFSET: f32 = 0.0;
override NW_OFF: u32 = 0u;
override WG: u32 = 256u;
const PMAX: u32 = 12u;
const DMAX: u32 = 8u;

@group(0) @binding(2) var<storage, read_write> x: array<vec4<f32>>;   // [x (K) | partials [FF / C][K]]
@group(0) @binding(4) var<storage, read> vecs: array<f32>;
@group(0) @binding(6) var<storage, read> d4: array<vec4<u32>>;        // down: words and block pairs,
@group(0) @binding(7) var<storage, read> d_meta: array<u32>;          // laid out as gate+up's

var<workgroup> pd: array<f32, WG>;
var<workgroup> act: array<f32, C>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wgid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j = wgid.x;
    let nch = K / 32u;
    // Gate rows of the units, then their up rows; LP invocations a row, interleaved chunks.
    let r = lid / LP;
    let lane = lid % LP;
    let row = select(FF + j * C + r - C, j * C + r, r < C);
    var gw: array<Wc, PMAX>;
    for (var i = 0u; i < CPL; i++) {
        gw[i] = wload(row, min(lane + i * LP, nch - 1u));
    }
    let dch = C / 32u;
    var dw: array<Wc, DMAX>;
    for (var i = 0u; i < RPL; i++) {
        let drow = min(lid + i * WG, K - 1u);
        for (var c = 0u; c < dch; c++) {
            dw[i * dch + c] = dload(drow, j * dch + c);
        }
    }
    let ss = stage_tile(0u, K, lid, true);
    workgroupBarrier();
    let inv_rms = 1.0 / sqrt(wg_sum(ss, lid) / f32(K) + EPS);
    var d = 0.0;
    for (var i = 0u; i < CPL; i++) {
        let c = lane + i * LP;
        if (c < nch) {
            d += chunk_dot(gw[i], c);
        }
    }
    pd[lid] = d;
    workgroupBarrier();
    if (lid < C) {
        var g = 0.0;
        var u = 0.0;
        for (var l = 0u; l < LP; l++) {
            g += pd[lid * LP + l];
            u += pd[(C + lid) * LP + l];
        }
        act[lid] = glu(g * inv_rms, u * inv_rms);
    }
    workgroupBarrier();
    for (var i = 0u; i < RPL; i++) {
        let drow = lid + i * WG;
        var acc = 0.0;
        for (var c = 0u; c < dch; c++) {
            acc += wdot(dw[i * dch + c], act_chunk(32u * c));
        }
        if (drow < K) {
            x[(1u + j) * (K / 4u) + drow / 4u][drow % 4u] = acc;
        }
    }
}

fn act_chunk(k: u32) -> Xc {
    return xc_of(act4(k), act4(k + 4u), act4(k + 8u), act4(k + 12u), act4(k + 16u), act4(k + 20u), act4(k + 24u),
                 act4(k + 28u));
}

fn act4(k: u32) -> vec4<f32> {
    return vec4<f32>(act[k], act[k + 1u], act[k + 2u], act[k + 3u]);
}

fn d_block_meta(b: u32) -> vec2<f32> {
    if (META16) {
        return unpack2x16float(d_meta[b]);
    }
    return vec2<f32>(bitcast<f32>(d_meta[2u * b]), bitcast<f32>(d_meta[2u * b + 1u]));
}

// Row `row`, chunk `c` of down: rowdot.wgsl's `wload` (quantized layouts) on down's bindings
// and row length.
fn dload(row: u32, c: u32) -> Wc {
    var w: Wc;
    let e = row * FF + 32u * c;
    if (LAYOUT == 3u) {
        w.a = d4[e / 32u];
        w.m = vec4<f32>(d_block_meta(e / 32u), 0.0, 0.0);
        return w;
    }
    w.a = d4[e / 16u];
    w.b = d4[e / 16u + 1u];
    if (QBLOCK == 32u) {
        w.m = vec4<f32>(d_block_meta(e / 32u), 0.0, 0.0);
    } else {
        w.m = vec4<f32>(d_block_meta(e / 16u), d_block_meta(e / 16u + 1u));
    }
    return w;
}
