// Prefill matmul on the GPU's matrix units (wgpu's cooperative matrices: VK_KHR_cooperative_matrix,
// the tensor cores on NVIDIA), over the tile of matmul_tile.wgsl: each K step's W tile is
// converted to f16 in workgroup memory, A is loaded in f16 from memory (matmul_f16.wgsl); each
// of the four 32-wide subgroups multiplies one 32x32 quarter of the 64x64 output as 2 x 2
// products of 16x16 f16 matrices accumulated in f32. The quarters then pass through workgroup
// memory to the shared epilogue (bias, residual add, edges). Chosen only where the adapter
// offers 16x16x16 f16 x f16 -> f32 products on 32-wide subgroups (crate/src/gpu/mod.rs); the
// assembler puts `enable f16; enable wgpu_cooperative_matrix;` first.
// Dispatch: Tiles(N): (ceil(N / 64), ceil(tokens / 64)).

// Unpadded rows: with matmul_coop_wide.wgsl's padding this tile ran slower on the H100
// (Llama-3.2-1B's down projection 6.9 -> 10.9 ms for 512 tokens, A then staged beside W).
const BKP: u32 = BK;

const WBUF: u32 = 2048u;                // BN * BKP
var<workgroup> w_h: array<vec4<f16>, 1024>;   // 2 x [BN][BKP] halves in fours: row n, then k (W^T's columns, k-contiguous)
var<workgroup> c_sh: array<f32, 4096>;  // [BM][BN]: the finished tile

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wg.y * BM;
    let n0 = wg.x * BN;
    // Subgroup s (invocations 32s .. 32s + 31 on 32-wide subgroups) owns rows qm.., columns qn...
    let s = lid / 32u;
    let qm = (s / 2u) * 32u;
    let qn = (s % 2u) * 32u;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    // A's fragments load one K step ahead (matmul_f16.wgsl).
    let arow = (m0 + qm) * K;
    var a = load_a(arow, 0u);
    // W's first step staged before the loop; each iteration then multiplies from one half of
    // w_h while it stores the next step into the other (one barrier a step instead of two).
    put_runs(load_runs(n0, 0u, lid, 128u), lid, 128u, 0u);
    workgroupBarrier();
    for (var k0 = 0u; k0 < K; k0 += BK) {
        let cur = ((k0 / BK) % 2u) * WBUF;
        let more = k0 + BK < K;
        var t: Runs;
        if (more) {
            t = load_runs(n0, k0 + BK, lid, 128u);
        }
        // The last step loads its own fragments again: matrix loads stay out of branches.
        let x = a;
        a = load_a(arow, min(k0 + BK, K - BK));
        // A row-major (k contiguous in a row); W^T column-major (k contiguous in a column).
        let b0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + qn * BKP) / 4u], BKP / 4u);
        let b1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 16u) * BKP) / 4u], BKP / 4u);
        c00 = coopMultiplyAdd(x.x00, b0, c00);
        c01 = coopMultiplyAdd(x.x00, b1, c01);
        c10 = coopMultiplyAdd(x.x10, b0, c10);
        c11 = coopMultiplyAdd(x.x10, b1, c11);
        let d0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + qn * BKP + 16u) / 4u], BKP / 4u);
        let d1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 16u) * BKP + 16u) / 4u], BKP / 4u);
        c00 = coopMultiplyAdd(x.x01, d0, c00);
        c01 = coopMultiplyAdd(x.x01, d1, c01);
        c10 = coopMultiplyAdd(x.x11, d0, c10);
        c11 = coopMultiplyAdd(x.x11, d1, c11);
        if (more) {
            put_runs(t, lid, 128u, WBUF - cur);
        }
        workgroupBarrier();
    }
    coopStoreT(c00, &c_sh[qm * BN + qn], BN);
    coopStoreT(c01, &c_sh[qm * BN + qn + 16u], BN);
    coopStoreT(c10, &c_sh[(qm + 16u) * BN + qn], BN);
    coopStoreT(c11, &c_sh[(qm + 16u) * BN + qn + 16u], BN);
    workgroupBarrier();
    // Invocation i writes row i / 2, columns 32 (i % 2) .. + 31.
    let r = lid / 2u;
    let col = (lid % 2u) * 32u;
    for (var j = 0u; j < 32u; j += 4u) {
        let o = r * BN + col + j;
        store(m0 + r, n0 + col + j, vec4<f32>(c_sh[o], c_sh[o + 1u], c_sh[o + 2u], c_sh[o + 3u]));
    }
}
