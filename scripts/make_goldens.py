#!/usr/bin/env python3
"""Writes tests/parity/goldens.json: HuggingFace transformers' logits and greedy tokens on
random-weight checkpoints made by `kvtier mkmodel`, and, per case under "sampling", what the
sampler chain is checked against: transformers' logits processors and warpers
(SequenceBias, RepetitionPenalty, Temperature, TopK, TopP, MinP) applied to the last
logits, log-softmax of the raw logits, the prompt's per-token log-probabilities and its
loss (labels = input ids: what `kvtier perplexity` reports), compute_transition_scores of a
greedy generate(output_logits=True), and a greedy decode under RepetitionPenalty.

Run on the GPU machine (where torch + transformers are installed):
    python3 scripts/make_goldens.py --kvtier build/tools/kvtier/kvtier --out new-goldens.json \
        --check-unchanged tests/parity/goldens.json
(--check-unchanged exits 1 when a value the committed file holds came out differently; new
keys are expected when cases are added.)

The Gemma 2, Gemma 3 and Phi-3 goldens (tests/parity/family_goldens.json, read by
family_parity_test.cc) come from the same script with --models families:
    python3 scripts/make_goldens.py --kvtier build/tools/kvtier/kvtier --models families \
        --out tests/parity/family_goldens.json
Their prompts are longer than the sliding windows, and they hold no sampler-chain goldens.
The Mixtral and Qwen3-MoE goldens (tests/parity/moe_goldens.json) likewise, with --models moe:
    python3 scripts/make_goldens.py --kvtier build/tools/kvtier/kvtier --models moe \
        --out tests/parity/moe_goldens.json
Each of their cases records, per sparse layer, how many distinct experts the prompt's tokens
were routed to ("experts_hit", from transformers' router logits); the script fails unless a
prompt of several tokens reaches more experts than top-k in every sparse layer, so the
goldens exercise real routing.
A model marked "cached" takes its greedy tokens and final logits from transformers' cached
generate(): LongRoPE switches to its long factors per position there (as kvtier does), while
an uncached forward of a sequence past the original context rotates every position with them.

Each model is written by our own mkmodel (deterministic from its seed) and loaded by
transformers' from_pretrained, so the goldens are an independent reference: the test
regenerates the same checkpoints and must match within 1e-4 relative error, with identical
greedy tokens. Computation is fp32 on the CPU with TF32 off (exact reference, not speed).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODELS = {
    # Llama with GQA and llama3 rope scaling (original_max_position_embeddings small enough
    # that the scaling bands are exercised at these head dims).
    "llama-gqa-rope3": ["--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128",
                        "--vocab", "512", "--max-positions", "2048", "--rope-theta", "500000",
                        "--rope-scaling", "llama3", "--dtype", "fp32", "--seed", "11"],
    # Mistral, stored bf16 and sharded (loading path of big checkpoints).
    "mistral-sharded-bf16": ["--arch", "mistral", "--hidden", "96", "--layers", "3", "--heads", "6",
                             "--kv-heads", "2", "--head-dim", "16", "--intermediate", "160",
                             "--vocab", "384", "--max-positions", "1024", "--dtype", "bf16",
                             "--shard-bytes", "96KiB", "--seed", "12"],
    # Qwen2: q/k/v biases, tied embeddings.
    "qwen2-bias-tied": ["--arch", "qwen2", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "1", "--head-dim", "16", "--intermediate", "96",
                        "--vocab", "448", "--max-positions", "1024", "--tie-embeddings",
                        "--rope-theta", "1000000", "--dtype", "fp32", "--seed", "13"],
    # Llama stored fp16 (the loader's fp16 path; the CUDA backend then runs in fp16).
    "llama-fp16": ["--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                   "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128",
                   "--vocab", "320", "--max-positions", "1024", "--dtype", "fp16", "--seed", "15"],
    # Qwen3: q/k RMSNorm, head_dim != hidden / heads.
    "qwen3-qknorm": ["--arch", "qwen3", "--hidden", "64", "--layers", "2", "--heads", "4",
                     "--kv-heads", "2", "--head-dim", "32", "--intermediate", "128",
                     "--vocab", "512", "--max-positions", "1024", "--rope-theta", "1000000",
                     "--dtype", "fp32", "--seed", "14"],
}

# Prompts longer than every window (16, 12, 20, 24 tokens) below.
FAMILY_MODELS = {
    # Gemma 2: GeGLU, (1 + w) sandwich norms, scaled embeddings, query_pre_attn_scalar !=
    # head_dim, attention and final soft-caps small enough to bend the values, layers 0 and 2
    # sliding (window 16), layer 1 full.
    "gemma2-softcap-window": {"args": ["--arch", "gemma2", "--hidden", "64", "--layers", "3", "--heads", "4",
                                       "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128",
                                       "--vocab", "512", "--max-positions", "1024", "--tie-embeddings",
                                       "--sliding-window", "16", "--query-pre-attn-scalar", "24",
                                       "--attn-softcap", "5", "--final-softcap", "8", "--rms-norm-eps", "1e-6",
                                       "--dtype", "fp32", "--seed", "21"],
                              "prompt_lengths": [1, 7, 23, 64, 100]},
    # Gemma 3: q/k norms, RoPE base 1e6 with linear scaling 8 on the full layer and 1e4 on
    # the sliding ones (pattern 3: layers 0, 1, 3 slide in a window of 12), MQA, head_dim !=
    # hidden / heads.
    "gemma3-qknorm-local-rope": {"args": ["--arch", "gemma3", "--hidden", "64", "--layers", "4", "--heads", "4",
                                          "--kv-heads", "1", "--head-dim", "32", "--intermediate", "128",
                                          "--vocab", "512", "--max-positions", "1024", "--tie-embeddings",
                                          "--sliding-window", "12", "--sliding-pattern", "3",
                                          "--query-pre-attn-scalar", "20", "--rope-theta", "1000000",
                                          "--rope-local-theta", "10000", "--rope-linear-factor", "8",
                                          "--rms-norm-eps", "1e-6",
                                          "--dtype", "fp32", "--seed", "22"],
                                 "prompt_lengths": [1, 7, 23, 64, 100]},
    # Phi-3: fused qkv_proj / gate_up_proj, every layer in a window of 20, plain RoPE.
    "phi3-fused-window": {"args": ["--arch", "phi3", "--hidden", "64", "--layers", "2", "--heads", "4",
                                   "--kv-heads", "2", "--head-dim", "16", "--intermediate", "96",
                                   "--vocab", "512", "--max-positions", "1024", "--sliding-window", "20",
                                   "--longrope", "0", "--untie-embeddings", "--dtype", "fp32", "--seed", "23"],
                          "prompt_lengths": [1, 7, 23, 64, 100]},
    # Phi-3 long variant: LongRoPE over an original context of 48 (max 256: attention factor
    # sqrt(1 + ln 5.33 / ln 48)); prompts within it, greedy decoding past it.
    "phi3-longrope": {"args": ["--arch", "phi3", "--hidden", "64", "--layers", "2", "--heads", "4",
                               "--kv-heads", "4", "--head-dim", "16", "--intermediate", "96",
                               "--vocab", "512", "--max-positions", "256", "--sliding-window", "24",
                               "--longrope", "48", "--untie-embeddings", "--dtype", "fp32", "--seed", "24"],
                      "prompt_lengths": [7, 23, 40], "cached": True},
}

# Mixture of experts: random routers spread the tokens over the experts.
MOE_MODELS = {
    # Mixtral: 8 experts, top 2 (softmax over the chosen logits), untied, RoPE base 1e6, every
    # layer in a sliding window of 20 (shorter than the longer prompts).
    "mixtral-8x2": {"args": ["--arch", "mixtral", "--hidden", "64", "--layers", "2", "--heads", "4",
                             "--kv-heads", "2", "--head-dim", "16", "--intermediate", "96", "--experts", "8",
                             "--experts-per-token", "2", "--vocab", "512", "--max-positions", "1024",
                             "--sliding-window", "20",
                             "--untie-embeddings", "--rope-theta", "1000000", "--dtype", "fp32", "--seed", "31"],
                    "top_k": 2, "prompt_lengths": [1, 7, 23, 64]},
    # Qwen3-MoE: q/k norms, 8 experts of width 48, top 3 not renormalized (Qwen3MoeConfig's
    # default), layer 1 a dense MLP of width 128 (mlp_only_layers).
    "qwen3moe-dense-layer": {"args": ["--arch", "qwen3moe", "--hidden", "64", "--layers", "3", "--heads", "4",
                                      "--kv-heads", "2", "--head-dim", "32", "--intermediate", "128",
                                      "--expert-intermediate", "48", "--experts", "8", "--experts-per-token", "3",
                                      "--norm-topk-prob", "false", "--dense-layers", "1", "--vocab", "512",
                                      "--max-positions", "1024", "--untie-embeddings", "--rope-theta", "1000000",
                                      "--dtype", "fp32", "--seed", "32"],
                             "top_k": 3, "prompt_lengths": [1, 7, 23, 64]},
    # Qwen3-MoE as the released ones: top 4 of 16 renormalized, tied embeddings, stored bf16.
    "qwen3moe-normtopk-bf16": {"args": ["--arch", "qwen3moe", "--hidden", "64", "--layers", "2", "--heads", "4",
                                        "--kv-heads", "1", "--head-dim", "16", "--intermediate", "96",
                                        "--expert-intermediate", "32", "--experts", "16", "--experts-per-token", "4",
                                        "--norm-topk-prob", "true", "--vocab", "384", "--max-positions", "1024",
                                        "--tie-embeddings", "--dtype", "bf16", "--seed", "33"],
                               "top_k": 4, "prompt_lengths": [1, 7, 23, 64]},
}

PROMPT_LENGTHS = [1, 7, 23, 64]
GREEDY_TOKENS = 32

# Sampler-chain cases: transformers' processors in its own order (bias, repetition penalty,
# then the warpers temperature, top-k, top-p, min-p) on a case's last logits, the prompt as
# input_ids. The keys are kvtier's request settings.
PROCESSOR_CASES = [
    {"name": "repetition_penalty", "repetition_penalty": 1.3},
    {"name": "repetition_penalty_below_1", "repetition_penalty": 0.7},
    {"name": "logit_bias", "logit_bias": {"5": 3.0, "17": -100.0, "60": 0.5}},
    {"name": "temperature_top_k", "temperature": 0.7, "top_k": 20},
    {"name": "top_p", "temperature": 1.0, "top_p": 0.8},
    {"name": "min_p", "temperature": 0.9, "min_p": 0.1},
    {"name": "chain", "repetition_penalty": 1.2, "logit_bias": {"5": 3.0, "9": -2.0}, "temperature": 0.8,
     "top_k": 50, "top_p": 0.9, "min_p": 0.05},
]
REPETITION_PENALTY = 1.3  # the greedy decode under RepetitionPenaltyLogitsProcessor
REPETITION_TOKENS = 16
TOP_LOGPROBS = 5


def short(x):
    """A double kept to 10 significant digits (the file stays small; tests need ~1e-6)."""
    return float(f"{x:.10g}")


def processor_list(case):
    from transformers import generation as g
    lp = g.logits_process
    procs = lp.LogitsProcessorList()
    if "logit_bias" in case:
        bias = [[[int(t)], float(b)] for t, b in case["logit_bias"].items()]
        try:
            procs.append(lp.SequenceBiasLogitsProcessor(sequence_bias=bias))
        except Exception:  # older signature: {tuple: bias}
            procs.append(lp.SequenceBiasLogitsProcessor(sequence_bias={(int(t),): float(b) for t, b in case["logit_bias"].items()}))
    if "repetition_penalty" in case:
        procs.append(lp.RepetitionPenaltyLogitsProcessor(penalty=case["repetition_penalty"]))
    if "temperature" in case:
        procs.append(lp.TemperatureLogitsWarper(case["temperature"]))
    if "top_k" in case:
        procs.append(lp.TopKLogitsWarper(top_k=case["top_k"]))
    if "top_p" in case:
        procs.append(lp.TopPLogitsWarper(top_p=case["top_p"]))
    if "min_p" in case:
        procs.append(lp.MinPLogitsWarper(min_p=case["min_p"]))
    return procs


def sampling_goldens(torch, model, prompt, last_logits):
    """The "sampling" object of one case (see the module docstring)."""
    ids = torch.tensor([prompt], dtype=torch.long)
    out = {"log_softmax": [short(x) for x in torch.log_softmax(last_logits.double(), -1).tolist()]}
    processors = []
    for case in PROCESSOR_CASES:
        scores = processor_list(case)(ids, last_logits[None].clone())[0]
        entry = dict(case)
        entry["probs"] = [short(x) for x in torch.softmax(scores.double(), -1).tolist()]
        if not any(k in case for k in ("temperature", "top_k", "top_p", "min_p")):
            entry["scores"] = [None if x == float("-inf") else float(x) for x in scores.tolist()]
        processors.append(entry)
    out["processors"] = processors
    if len(prompt) >= 2:
        full = model(ids, labels=ids)
        out["loss"] = float(full.loss.item())
        logp = torch.log_softmax(full.logits[0, :-1].double(), -1)
        out["prompt_logprobs"] = [float(logp[i, prompt[i + 1]]) for i in range(len(prompt) - 1)]
    # Greedy generate with output_logits: compute_transition_scores(normalize_logits=True)
    # is log-softmax of the raw logits at each chosen token. EOS off (kvtier ignores it too).
    from transformers import GenerationConfig
    model.generation_config.eos_token_id = None  # nothing to merge back from the model's defaults
    model.config.eos_token_id = None
    config = GenerationConfig(do_sample=False, max_new_tokens=GREEDY_TOKENS, eos_token_id=None, pad_token_id=0,
                              output_logits=True, return_dict_in_generate=True)
    gen = model.generate(ids, generation_config=config, attention_mask=torch.ones_like(ids))
    out["generate_tokens"] = gen.sequences[0, len(prompt):].tolist()
    try:
        scores = model.compute_transition_scores(gen.sequences, gen.logits, normalize_logits=True)
        out["transition_scores"] = [float(x) for x in scores[0].tolist()]
        out["transition_scores_source"] = "compute_transition_scores"
    except Exception as e:  # the same quantity by hand, saying so
        out["transition_scores"] = [float(torch.log_softmax(step[0].double(), -1)[t])
                                    for step, t in zip(gen.logits, out["generate_tokens"])]
        out["transition_scores_source"] = f"log_softmax (compute_transition_scores failed: {e})"
    out["generate_top_logprobs"] = []
    for step_logits in gen.logits:
        logp = torch.log_softmax(step_logits[0].double(), -1)
        values, indices = torch.topk(logp, TOP_LOGPROBS)
        out["generate_top_logprobs"].append([[int(i), float(v)] for i, v in zip(indices.tolist(), values.tolist())])
    # Greedy decode under the repetition penalty (full recompute each step, as the greedy
    # goldens): the tokens and the raw log-probabilities of each.
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor
    penalty = RepetitionPenaltyLogitsProcessor(penalty=REPETITION_PENALTY)
    tokens = list(prompt)
    rep_tokens, rep_logprobs = [], []
    for _ in range(REPETITION_TOKENS):
        logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0, -1]
        scores = penalty(torch.tensor([tokens], dtype=torch.long), logits[None].clone())[0]
        nxt = int(torch.argmax(scores).item())
        rep_tokens.append(nxt)
        rep_logprobs.append(float(torch.log_softmax(logits.double(), -1)[nxt]))
        tokens.append(nxt)
    out["repetition_greedy"] = {"repetition_penalty": REPETITION_PENALTY, "tokens": rep_tokens,
                                "logprobs": rep_logprobs}
    return out


def family_greedy(torch, model, prompt, cached):
    """Greedy tokens and the logits that chose the last one: full recompute at every step,
    or (cached) transformers' generate() with its KV cache."""
    if not cached:
        tokens = list(prompt)
        greedy = []
        for _ in range(GREEDY_TOKENS):
            logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0, -1]
            greedy.append(int(torch.argmax(logits).item()))
            tokens.append(greedy[-1])
        final_logits = model(torch.tensor([tokens[:-1]], dtype=torch.long)).logits[0, -1].double().tolist()
        return greedy, final_logits
    from transformers import GenerationConfig
    model.generation_config.eos_token_id = None
    model.config.eos_token_id = None
    config = GenerationConfig(do_sample=False, max_new_tokens=GREEDY_TOKENS, eos_token_id=None, pad_token_id=0,
                              output_logits=True, return_dict_in_generate=True, use_cache=True)
    ids = torch.tensor([prompt], dtype=torch.long)
    gen = model.generate(ids, generation_config=config, attention_mask=torch.ones_like(ids))
    return gen.sequences[0, len(prompt):].tolist(), gen.logits[-1][0].double().tolist()


def experts_hit(torch, model, ids, top_k):
    """Per sparse layer, the number of distinct experts the prompt's tokens were routed to."""
    out = model(ids, output_router_logits=True)
    hits = []
    for logits in out.router_logits or ():
        chosen = torch.topk(torch.softmax(logits.float().reshape(-1, logits.shape[-1]), -1), top_k, dim=-1).indices
        hits.append(len(set(chosen.flatten().tolist())))
    if not hits:
        raise SystemExit("no router logits came back: cannot check that the prompts route to several experts")
    if ids.shape[1] > 1 and min(hits) <= top_k:
        raise SystemExit(f"a prompt of {ids.shape[1]} tokens reached only {hits} experts: routing is trivial")
    return hits


def prompts_for(vocab, seed, lengths=PROMPT_LENGTHS):
    # A tiny LCG so the prompts are reproducible without numpy/torch RNG details.
    state = seed * 2654435761 % (2 ** 32)
    out = []
    for length in lengths:
        ids = []
        for _ in range(length):
            state = (state * 1664525 + 1013904223) % (2 ** 32)
            ids.append(3 + state % (vocab - 3))
        out.append(ids)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvtier", required=True, help="path of the kvtier CLI")
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", choices=["base", "families", "moe"], default="base",
                        help="base: the Llama-family models and sampler goldens (goldens.json); families: Gemma 2, "
                        "Gemma 3 and Phi-3 (family_goldens.json); moe: Mixtral and Qwen3-MoE (moe_goldens.json)")
    parser.add_argument("--check-unchanged", help="an earlier goldens.json: exit 1 (after writing --out) unless "
                        "every value it holds came out the same (new keys are allowed)")
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)
    goldens = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
               "greedy_tokens": GREEDY_TOKENS, "models": {}}
    special = {"families": FAMILY_MODELS, "moe": MOE_MODELS}.get(args.models, {})
    if special:
        models = {name: model["args"] for name, model in special.items()}
    else:
        models = MODELS
    with tempfile.TemporaryDirectory() as tmp:
        for name, mk_args in models.items():
            directory = os.path.join(tmp, name)
            subprocess.run([args.kvtier, "mkmodel", "--out", directory] + mk_args, check=True)
            model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32,
                                                         attn_implementation="eager")
            model.eval()
            vocab = model.config.vocab_size
            cases = []
            family = special.get(name)
            lengths = family["prompt_lengths"] if family else PROMPT_LENGTHS
            for prompt in prompts_for(vocab, len(cases) + sum(map(ord, name)), lengths):
                ids = torch.tensor([prompt], dtype=torch.long)
                last_logits = model(ids).logits[0, -1].double().tolist()
                if family:
                    greedy, final_logits = family_greedy(torch, model, prompt, family.get("cached", False))
                    cases.append({"prompt": prompt, "last_logits": last_logits, "greedy": greedy,
                                  "final_logits": final_logits})
                    if "top_k" in family:
                        cases[-1]["experts_hit"] = experts_hit(torch, model, ids, family["top_k"])
                    print(f"{name}: prompt {len(prompt)} -> {greedy[:8]}...", flush=True)
                    continue
                tokens = list(prompt)
                greedy = []
                for _ in range(GREEDY_TOKENS):
                    logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0, -1]
                    nxt = int(torch.argmax(logits).item())
                    greedy.append(nxt)
                    tokens.append(nxt)
                final_logits = model(torch.tensor([tokens[:-1]], dtype=torch.long)).logits[0, -1].double().tolist()
                sampling = sampling_goldens(torch, model, prompt, model(ids).logits[0, -1])
                cases.append({"prompt": prompt, "last_logits": last_logits, "greedy": greedy,
                              "final_logits": final_logits, "sampling": sampling})
                print(f"{name}: prompt {len(prompt)} -> {greedy[:8]}...", flush=True)
            goldens["models"][name] = {"mkmodel_args": mk_args, "cases": cases}
    with open(args.out, "w") as f:
        json.dump(goldens, f)
    print(f"wrote {args.out}")
    if args.check_unchanged:
        with open(args.check_unchanged) as f:
            before = json.load(f)
        changed = [path for path in diff_paths(before, goldens, "") if not path.startswith("/torch_version")
                   and not path.startswith("/transformers_version")]
        if changed:
            print(f"values changed against {args.check_unchanged}: {changed[:10]} ({len(changed)} in all)")
            return 1
        print(f"every value of {args.check_unchanged} came out the same")


def diff_paths(before, after, path):
    """Paths of the values of `before` that `after` lacks or holds differently."""
    if isinstance(before, dict):
        if not isinstance(after, dict):
            return [path]
        return [p for k, v in before.items() for p in (diff_paths(v, after[k], f"{path}/{k}") if k in after else [f"{path}/{k}"])]
    if isinstance(before, list):
        if not isinstance(after, list) or len(after) != len(before):
            return [path]
        return [p for i, (a, b) in enumerate(zip(before, after)) for p in diff_paths(a, b, f"{path}/{i}")]
    return [] if before == after else [path]


if __name__ == "__main__":
    sys.exit(main())
