// Decode matrix-vector product, y = W · x for one token, with optional fusions:
//   NORM: x is RMS-normalized on the fly (x / rms(x) * (nw + NW_OFFSET)); the sum of squares
//         is reduced alongside the dot products, so the norm costs no extra dispatch.
//   EPI 0: y[n] = v (+ bias)         EPI 1: y[n] += v (residual add)
//   SCALE (EPI 0/1): v (+ bias) scaled before it is stored or added (Granite's residual and
//          logit multipliers).
//   EPI 3: y[n] = act(v + bias) (glu.wgsl's activation: an FFN without a gate)
//   EPI 2: GLU: y[j] = act(gate_j) * up_j with gate rows [0, N/2) and up rows [N/2, N) (biases
//          added to both first).
// Each 32-invocation row group computes (a slice of) four rows (`dot4`, rowdot.wgsl; for GLU the
// gate and up rows of two outputs), reduced by `reduce4` (reduce_*.wgsl) and `join_slices`;
// WG / 32 / S blocks of four rows per workgroup.
// A matrix too large for one binding (a wide vocabulary's LM head) runs as one dispatch per row
// range: W holds rows ROW0 .. ROW0 + N of Y_ROWS, and its argmax pairs start at pair WG0.

override K: u32;
override N: u32;
override EPI: u32 = 0u;
override NORM: bool = false;
override EPS: f32 = 1e-5;
override NW_OFFSET: f32 = 0.0;
override NW_OFF: u32 = 0u;       // norm weight offset in `vecs`
override HAS_BIAS: bool = false;
override BIAS_OFF: u32 = 0u;     // bias offset in `vecs`
override SOFTCAP: f32 = 0.0;    // EPI 0: y = SOFTCAP * tanh(v / SOFTCAP) (Gemma 2's final logits)
override WG: u32 = 64u;         // invocations per workgroup: 32 to 512 (256 without subgroups), a multiple of 32 * S
override ARGMAX: bool = false;  // EPI 0: also each workgroup's largest output (greedy decoding)
override ROW0: u32 = 0u;        // EPI 0/1: the first row of y this dispatch writes
override Y_ROWS: u32 = 0u;      // rows of y before the argmax pairs (0: N)
override WG0: u32 = 0u;         // this dispatch's first argmax pair
override YP: u32 = 0u;          // EPI 1: partials of a split FFN after y's N rows, added too (ffn_split.wgsl)
override SCALE: f32 = 1.0;

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;

// x as rowdot.wgsl reads it.
fn xv(v: u32) -> vec4<f32> {
    return x[v];
}

@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> vecs: array<f32>;

var<workgroup> best_v: array<f32, 128>;
var<workgroup> best_i: array<u32, 128>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wgid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let wgi = wgid.x + wgid.y * nwg.x;
    let grp = lid / 32u;
    let slot = grp / S;                       // row block within the workgroup
    let g = wgi * (WG / 32u / S) + slot;      // row block within the matrix
    let slice = grp % S;
    let t = lid % 32u;
    // Rows of this block, and (for the epilogue) how many outputs it owns.
    var rows = vec4<u32>(4u * g) + vec4<u32>(0u, 1u, 2u, 3u);
    if (EPI == 2u) {
        let j = 2u * g;
        rows = vec4<u32>(j, j + 1u, j + N / 2u, j + 1u + N / 2u);
    }
    let first = rows.x;
    // What the epilogue adds (bias, residual) is requested now, not after the reduction: each
    // dependent memory round trip adds its latency to the step.
    let row = min(first + min(t, 3u), N - 1u);
    var extra = 0.0;
    var bias = 0.0;
    if (HAS_BIAS) {
        bias = vecs[BIAS_OFF + ROW0 + row];
    }
    if (SCALE == 1.0) {
        extra = bias;
    }
    if (EPI == 1u) {
        extra += y[ROW0 + row];
        for (var p = 1u; p <= YP; p++) {
            extra += y[p * N + row];
        }
    }
    let d = dot4(min(rows, vec4<u32>(N - 1u)), lid, slice, NORM);
    var v = join_slices(reduce4(d.v, lid), lid);
    if (NORM) {
        v *= 1.0 / sqrt(d.ss / f32(K) + EPS);
    }
    // No early returns: the argmax epilogue below has a barrier, which needs uniform control flow.
    if (EPI == 2u) {
        if (slice == 0u && t < 2u && first + t < N / 2u) {
            var gt = v[t];
            var up = v[t + 2u];
            if (HAS_BIAS) {
                gt += vecs[BIAS_OFF + first + t];
                up += vecs[BIAS_OFF + first + t + N / 2u];
            }
            y[first + t] = glu(gt, up);
        }
    } else {
        store(v, first, slice, t, slot, wgi, bias, extra);
    }
}

// `extra` holds the bias too unless SCALE scales it with v.
fn store(v: vec4<f32>, first: u32, slice: u32, t: u32, slot: u32, wgi: u32, bias: f32, extra: f32) {
    let row = first + min(t, 3u);
    var o = v[min(t, 3u)] + extra;
    if (SCALE != 1.0) {
        o = (v[min(t, 3u)] + bias) * SCALE + extra;
    }
    let owner = slice == 0u && t < 4u && row < N;
    if (SOFTCAP > 0.0) {
        o = SOFTCAP * tanh(o / SOFTCAP);
    }
    if (EPI == 3u) {
        o = glu_act(o);
    }
    if (owner) {
        y[ROW0 + row] = o;
    }
    if (ARGMAX) {
        // This workgroup's largest value (lowest row on ties, NaN never wins) goes to
        // y[N + 2 wgi ..] (Y_ROWS, WG0: after every range's rows), for argmax.wgsl to finish
        // over all workgroups.
        if (slice == 0u && t < 4u) {
            best_v[slot * 4u + t] = select(-3.4e38, o, owner);
            best_i[slot * 4u + t] = select(0xffffffffu, ROW0 + row, owner);
        }
        workgroupBarrier();
        if (slot == 0u && slice == 0u && t == 0u) {
            var bv = -3.4e38;
            var bi = 0xffffffffu;
            for (var i = 0u; i < 4u * WG / 32u / S; i++) {
                if (best_v[i] > bv) {
                    bv = best_v[i];
                    bi = best_i[i];
                }
            }
            let at = select(Y_ROWS, N, Y_ROWS == 0u) + 2u * (WG0 + wgi);
            y[at] = bv;
            y[at + 1u] = bitcast<f32>(bi);
        }
    }
}
