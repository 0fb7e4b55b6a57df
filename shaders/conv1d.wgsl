// Gated DeltaNet's short causal convolution (Qwen3.5), one invocation per channel: each token of
// the step through the last TAPS inputs of its channel, then SiLU. The inputs before the step
// come from the layer's convolution state (TAPS - 1 per channel; zero for a step at position 0),
// which is left holding the step's last inputs for the next one. Channel-parallel and sequential
// in time, so decode and prefill are the same dispatch.

override C: u32;        // channels: q and k of every key head, v of every value head
override TAPS: u32;     // <= 16
override STRIDE: u32;   // floats between tokens' rows of the input projection (channels first)
override W_OFF: u32;    // the taps in vecs, [channel][tap], the newest input's tap last

@group(0) @binding(0) var<storage, read> xin: array<f32>;
@group(0) @binding(1) var<storage, read> vecs: array<f32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;  // [tap][channel]
@group(0) @binding(3) var<storage, read_write> out: array<f32>;    // [token][C]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= C) {
        return;
    }
    // The last TAPS - 1 inputs, oldest first.
    var win: array<f32, 16>;
    let fresh = step.pos0 == 0u;
    for (var j = 0u; j + 1u < TAPS; j++) {
        win[j] = select(state[j * C + c], 0.0, fresh);
    }
    let w = W_OFF + c * TAPS;
    for (var t = 0u; t < step.n_tokens; t++) {
        let x = xin[t * STRIDE + c];
        var acc = vecs[w + TAPS - 1u] * x;
        for (var j = 0u; j + 1u < TAPS; j++) {
            acc += vecs[w + j] * win[j];
        }
        for (var j = 0u; j + 2u < TAPS; j++) {
            win[j] = win[j + 1u];
        }
        if (TAPS > 1u) {
            win[TAPS - 2u] = x;
        }
        out[t * C + c] = acc / (1.0 + exp(-acc));
    }
    for (var j = 0u; j + 1u < TAPS; j++) {
        state[j * C + c] = win[j];
    }
}
