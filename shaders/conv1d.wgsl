// Gated DeltaNet's short causal convolution (Qwen3.5): each token of the step through the last
// TAPS inputs of its channel, then SiLU. The inputs before the step come from the layer's
// convolution state (TAPS - 1 per channel; zero for a step at position 0), which is left holding
// the step's last inputs for the next one. Three modes of one kernel:
//   MODE 0 (decode): one invocation per channel walks the step's tokens and updates the state.
//   MODE 1 (prefill): one invocation per (token, channel), reading the state, writing outputs.
//   MODE 2 (prefill, after mode 1): one invocation per channel moves the state forward.
// Modes 1 and 2 are separate dispatches so no invocation writes the state another reads.

override C: u32;        // channels: q and k of every key head, v of every value head
override TAPS: u32;     // <= 16
override STRIDE: u32;   // floats between tokens' rows of the input projection (channels first)
override W_OFF: u32;    // the taps in vecs, [channel][tap], the newest input's tap last
override MODE: u32 = 0u;

@group(0) @binding(0) var<storage, read> xin: array<f32>;
@group(0) @binding(1) var<storage, read> vecs: array<f32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;  // [tap][channel]
@group(0) @binding(3) var<storage, read_write> out: array<f32>;    // [token][C]

// Input `back` steps before token t of channel c (back < TAPS), from the step or the state.
fn input(t: u32, back: u32, c: u32) -> f32 {
    if (back <= t) {
        return xin[(t - back) * STRIDE + c];
    }
    if (step.pos0 == 0u) {
        return 0.0;
    }
    // The state holds the TAPS - 1 inputs before the step, oldest first.
    return state[(TAPS - 1u - (back - t)) * C + c];
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    if (MODE == 1u) {
        let e = gid.x + gid.y * nwg.x * 256u;
        if (e >= step.n_tokens * C) {
            return;
        }
        let t = e / C;
        let c = e % C;
        var acc = 0.0;
        for (var j = 0u; j < TAPS; j++) {
            acc += vecs[W_OFF + c * TAPS + j] * input(t, TAPS - 1u - j, c);
        }
        out[e] = acc / (1.0 + exp(-acc));
        return;
    }
    let c = gid.x;
    if (c >= C) {
        return;
    }
    if (MODE == 2u) {
        // The new state: the TAPS - 1 inputs before the step's end, read before any is written.
        var next: array<f32, 16>;
        let n = step.n_tokens;
        for (var j = 0u; j + 1u < TAPS; j++) {
            next[j] = input(n - 1u, TAPS - 2u - j, c);
        }
        for (var j = 0u; j + 1u < TAPS; j++) {
            state[j * C + c] = next[j];
        }
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
