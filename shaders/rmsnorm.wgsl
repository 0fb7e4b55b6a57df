// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + EPS) * (w + NW_OFFSET), one workgroup per row;
// w is read from the layer's `vecs` buffer at NW_OFF.
// LAST_ONLY normalizes just the last token's row (the LM head needs nothing else).
// F16_OUT also writes the rows in f16 to y16 (pairs packed in words, as to_f16.wgsl would leave
// them) for the matrix-unit matmul that reads them: one pass over the activations fewer.
// I8_OUT instead writes the rows as the 8-bit matmul reads them (quant_block.wgsl: 16 words a
// 32-element block to y16, the block's (d, sum) to y8s) and not in f32: one dispatch fewer in
// front of each 8-bit matmul it feeds.

override H: u32;
override EPS: f32;
override NW_OFFSET: f32 = 0.0;
override LAST_ONLY: bool = false;
override NW_OFF: u32 = 0u;
override ADD: bool = false;   // y += result (Gemma's post-norms feed the residual stream)
override F16_OUT: bool = false;   // H even, not with ADD or LAST_ONLY
override I8_OUT: bool = false;    // H a multiple of 32, not with ADD or LAST_ONLY
// Rows of H values STRIDE apart from column COL0 (OLMo 2's norm of each token's q or k in its
// [q; k; v] row), normalised where they are (IN_PLACE: y is read, x unused). Plain rows only.
override STRIDE: u32 = 0u;   // 0: H
override COL0: u32 = 0u;
override IN_PLACE: bool = false;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> vecs: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> y16: array<u32>;
@group(0) @binding(6) var<storage, read_write> y8s: array<vec2<f32>>;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var row = wg.x;
    var out_row = wg.x;
    if (LAST_ONLY) {
        row = step.n_tokens - 1u;
        out_row = 0u;
    } else if (row >= step.n_tokens) {
        return;
    }
    let stride = select(H, STRIDE, STRIDE > 0u);
    var ss = 0.0;
    for (var i = lid; i < H; i += 256u) {
        let v = x_at(row * stride + COL0 + i);
        ss += v * v;
    }
    partial[lid] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(partial[0] / f32(H) + EPS);
    if (I8_OUT) {
        // 32 blocks a pass, eight invocations a block (quant_part).
        let nb = H / 32u;
        let part = lid % 8u;
        for (var b0 = 0u; b0 < nb; b0 += 32u) {
            let blk = b0 + lid / 8u;
            let on = blk < nb;
            let k = 32u * min(blk, nb - 1u) + 4u * part;
            let xv = vec4<f32>(x[row * H + k], x[row * H + k + 1u], x[row * H + k + 2u], x[row * H + k + 3u]);
            let wv = vec4<f32>(vecs[NW_OFF + k], vecs[NW_OFF + k + 1u], vecs[NW_OFF + k + 2u], vecs[NW_OFF + k + 3u]);
            let q = quant_part(xv * inv * (wv + NW_OFFSET), lid);
            if (on) {
                let b = row * nb + blk;
                let w = plane_words(b, part);
                y16[w.x] = q.c;
                y16[w.y] = q.f;
                if (part == 0u) {
                    y8s[b] = q.ds;
                }
            }
        }
        return;
    }
    if (F16_OUT) {
        // Pairs: each word of y16 holds two values of the row.
        for (var p = lid; p < H / 2u; p += 256u) {
            let i = row * H + 2u * p;
            let w = vec2<f32>(vecs[NW_OFF + 2u * p], vecs[NW_OFF + 2u * p + 1u]) + NW_OFFSET;
            let v = vec2<f32>(x[i], x[i + 1u]) * inv * w;
            y[i] = v.x;
            y[i + 1u] = v.y;
            y16[i / 2u] = pack_h2(v);
        }
        return;
    }
    for (var i = lid; i < H; i += 256u) {
        let v = x_at(row * stride + COL0 + i) * inv * (vecs[NW_OFF + i] + NW_OFFSET);
        if (ADD) {
            y[out_row * stride + COL0 + i] += v;
        } else {
            y[out_row * stride + COL0 + i] = v;
        }
    }
}

fn x_at(i: u32) -> f32 {
    if (IN_PLACE) {
        return y[i];
    }
    return x[i];
}
