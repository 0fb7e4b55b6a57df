// The GLU's activation of a gate value, times its up value: SiLU (Llama, Qwen, Phi-3), GELU with
// the tanh approximation (Gemma) or ReLU² (BitNet). Shared by the decode matvecs' GLU epilogue
// (rowdot.wgsl), prefill's GLU pass (ffn_act.wgsl) and the 8-bit matmul's GLU epilogue.
override GELU: bool = false;
override RELU2: bool = false;   // BitNet's relu(x)^2
override UNGATED: bool = false; // act(up) alone: the FFN has no gate (Arcee); ffn_act.wgsl, matvec EPI 3

fn glu_act(g: f32) -> f32 {
    if (GELU) {
        return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    }
    if (RELU2) {
        return max(g, 0.0) * max(g, 0.0);
    }
    return g / (1.0 + exp(-g));
}

fn glu(gt: f32, up: f32) -> f32 {
    return glu_act(gt) * up;
}
