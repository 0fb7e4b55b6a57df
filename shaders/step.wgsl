// The step uniform at binding 5, prepended to every kernel (mask.wgsl ignores it). The runtime
// writes it once per step (crate/src/runtime.rs) and every dispatch of the step reads it, so the
// recorded dispatches replay unchanged from token to token; ops::run_once writes one per
// test dispatch.
struct Step {
    n_tokens: u32,  // tokens this dispatch covers (1 when decoding)
    pos0: u32,      // position of the first of them
    slot: u32,      // the sampler's ring slot (argmax.wgsl, sample.wgsl)
    _p1: u32,
}

@group(0) @binding(5) var<uniform> step: Step;

