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

// Scalars: each invocation stores its own rows of the partials, and a store to one component of
// a vector may rewrite the whole vector (Metal), which four invocations would share.
@group(0) @binding(2) var<storage, read_write> x: array<f32>;   // [x (K) | partials [FF / C][K]]
@group(0) @binding(4) var<storage, read> vecs: array<f32>;
@group(0) @binding(6) var<storage, read> d4: array<vec4<u32>>;        // down: words and block pairs,
@group(0) @binding(7) var<storage, read> d_meta: array<u32>;          // laid out as gate+up's

// x as rowdot.wgsl reads it.
fn xv(v: u32) -> vec4<f32> {
    return vec4<f32>(x[4u * v], x[4u * v + 1u], x[4u * v + 2u], x[4u * v + 3u]);
}

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
    // C / 32u down chunks a row: spelled out, not a `let`, so browsers see the loops' constant bound.
    var dw: array<Wc, DMAX>;
    for (var i = 0u; i < RPL; i++) {
        let drow = min(lid + i * WG, K - 1u);
        for (var c = 0u; c < C / 32u; c++) {
            dw[i * (C / 32u) + c] = dload(drow, j * (C / 32u) + c);
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
        let r0 = min(lid, C - 1u);
        for (var l = 0u; l < LP; l++) {
            g += pd[r0 * LP + l];
            u += pd[(C + r0) * LP + l];
        }
        act[lid] = glu(g * inv_rms, u * inv_rms);
    }
    workgroupBarrier();
    for (var i = 0u; i < RPL; i++) {
        let drow = lid + i * WG;
        var acc = 0.0;
        for (var c = 0u; c < C / 32u; c++) {
            acc += wdot(dw[i * (C / 32u) + c], act_chunk(32u * c));
        }
        if (drow < K) {
            x[(1u + j) * K + drow] = acc;
        }
    }
}

// The 32 activations from k. Read from one bounded base, so that a browser's range analysis
// proves all 32 indices and leaves out its clamp on each (this kernel took 0.80x the time with
// the browser's clamps off, H200); a helper taking the index would hide its range again.
fn act_chunk(k: u32) -> Xc {
    let b = min(k, C - 32u);
    return xc_of(vec4<f32>(act[b], act[b + 1u], act[b + 2u], act[b + 3u]),
                 vec4<f32>(act[b + 4u], act[b + 5u], act[b + 6u], act[b + 7u]),
                 vec4<f32>(act[b + 8u], act[b + 9u], act[b + 10u], act[b + 11u]),
                 vec4<f32>(act[b + 12u], act[b + 13u], act[b + 14u], act[b + 15u]),
                 vec4<f32>(act[b + 16u], act[b + 17u], act[b + 18u], act[b + 19u]),
                 vec4<f32>(act[b + 20u], act[b + 21u], act[b + 22u], act[b + 23u]),
                 vec4<f32>(act[b + 24u], act[b + 25u], act[b + 26u], act[b + 27u]),
                 vec4<f32>(act[b + 28u], act[b + 29u], act[b + 30u], act[b + 31u]));
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
