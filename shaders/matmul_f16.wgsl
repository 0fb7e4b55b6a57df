// The matrix-unit matmuls' staging (matmul_coop.wgsl, matmul_coop_wide.wgsl): one K step's A
// elements and W runs, loaded in f32 by matmul_tile.wgsl, written to the f16 tiles `a_h` and `w_h`
// that each kernel declares with its own size, both with k contiguous (stride BK).

fn put_a(i: u32, v: vec4<f32>) {
    let o = (i / 8u) * BK + (i % 8u) * 4u;
    a_h[o] = f16(v.x);
    a_h[o + 1u] = f16(v.y);
    a_h[o + 2u] = f16(v.z);
    a_h[o + 3u] = f16(v.w);
}

fn put_w(j: u32, w: W8) {
    let o = (j / 4u) * BK + (j % 4u) * 8u;
    w_h[o] = f16(w.lo.x);
    w_h[o + 1u] = f16(w.lo.y);
    w_h[o + 2u] = f16(w.lo.z);
    w_h[o + 3u] = f16(w.lo.w);
    w_h[o + 4u] = f16(w.hi.x);
    w_h[o + 5u] = f16(w.hi.y);
    w_h[o + 6u] = f16(w.hi.z);
    w_h[o + 7u] = f16(w.hi.w);
}


// A whole K step of invocation `lid` of `wg` (load_tile's indexing).
fn put_tile(t: Tile, lid: u32, wg: u32) {
    put_a(lid, t.a0);
    put_a(lid + wg, t.a1);
    put_a(lid + 2u * wg, t.a2);
    put_a(lid + 3u * wg, t.a3);
    put_w(lid, t.w0);
    put_w(lid + wg, t.w1);
}
