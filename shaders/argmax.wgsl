// Greedy sampling on the GPU: the index of the largest logit (lowest index on ties, like
// torch.argmax) goes to ids[0], where the next step's embedding reads it, and to
// out[slot] for the CPU to read back without stalling the next step. The LM head's matvec
// workgroups left their own (largest value, index) pairs after the V logits (matvec.wgsl
// ARGMAX); this finishes over those P pairs, so no single workgroup scans the vocabulary.

override V: u32;
override P: u32;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var i = lid; i < P; i += 256u) {
        let v = logits[V + 2u * i];
        let j = bitcast<u32>(logits[V + 2u * i + 1u]);
        if (v > bv || (v == bv && j < bi)) {
            bv = v;
            bi = j;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let ov = best_v[lid + s];
            let oi = best_i[lid + s];
            if (ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid])) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        // No logit was a number (NaN everywhere): the next step's embedding still reads an id in
        // range, and the CPU gets the out-of-range one, which the engine reports.
        let tok = best_i[0];
        ids[0] = select(tok, 0u, tok >= V);
        out[step.slot] = tok;
    }
}
