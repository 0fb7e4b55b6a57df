// Prefill and decode timing on libllama, the way `ferrolm bench` times its own: a prompt of
// random token ids in one llama_decode, then `gen` single-token decodes after it, each
// synchronized; `reps` repetitions after one warm-up, medians printed as one JSON line. The
// llama-cpp-sys-2 crate vendors llama.cpp's libraries but not its tools (no llama-bench).
//
//   llamacpp-bench MODEL.gguf PROMPT_LEN GEN REPS

#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT_LEN GEN REPS\n", argv[0]);
        return 2;
    }
    const int n_prompt = std::atoi(argv[2]);
    const int n_gen = std::atoi(argv[3]);
    const int reps = std::atoi(argv[4]);
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 999;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_prompt + n_gen + 16;
    cp.n_batch = n_prompt;
    cp.n_ubatch = std::min(n_prompt, 512);
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "cannot make a context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::srand(1);
    std::vector<llama_token> prompt(n_prompt);
    for (auto & t : prompt) {
        t = std::rand() % n_vocab;
    }
    std::vector<double> pp, tg;
    for (int r = 0; r <= reps; r++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        double t0 = now_s();
        if (llama_decode(ctx, llama_batch_get_one(prompt.data(), n_prompt)) != 0) {
            std::fprintf(stderr, "prompt decode failed\n");
            return 1;
        }
        llama_synchronize(ctx);
        double t1 = now_s();
        for (int i = 0; i < n_gen; i++) {
            llama_token t = std::rand() % n_vocab;
            if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
                std::fprintf(stderr, "decode failed\n");
                return 1;
            }
            llama_synchronize(ctx);
        }
        double t2 = now_s();
        if (r > 0) {
            pp.push_back(n_prompt / (t1 - t0));
            tg.push_back(n_gen / (t2 - t1));
        }
    }
    std::printf("{\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.1f}\n", median(pp), median(tg));
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
