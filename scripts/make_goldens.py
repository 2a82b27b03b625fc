#!/usr/bin/env python3
"""Writes tests/parity/goldens.json: HuggingFace transformers' logits and greedy tokens on
random-weight checkpoints made by `kvtier mkmodel`.

Run on the GPU machine (where torch + transformers are installed):
    python3 scripts/make_goldens.py --kvtier build/tools/kvtier/kvtier --out tests/parity/goldens.json

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

PROMPT_LENGTHS = [1, 7, 23, 64]
GREEDY_TOKENS = 32


def prompts_for(vocab, seed):
    # A tiny LCG so the prompts are reproducible without numpy/torch RNG details.
    state = seed * 2654435761 % (2 ** 32)
    out = []
    for length in PROMPT_LENGTHS:
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
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)
    goldens = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
               "greedy_tokens": GREEDY_TOKENS, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, mk_args in MODELS.items():
            directory = os.path.join(tmp, name)
            subprocess.run([args.kvtier, "mkmodel", "--out", directory] + mk_args, check=True)
            model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32,
                                                         attn_implementation="eager")
            model.eval()
            vocab = model.config.vocab_size
            cases = []
            for prompt in prompts_for(vocab, len(cases) + sum(map(ord, name))):
                ids = torch.tensor([prompt], dtype=torch.long)
                last_logits = model(ids).logits[0, -1].double().tolist()
                tokens = list(prompt)
                greedy = []
                for _ in range(GREEDY_TOKENS):
                    logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0, -1]
                    nxt = int(torch.argmax(logits).item())
                    greedy.append(nxt)
                    tokens.append(nxt)
                final_logits = model(torch.tensor([tokens[:-1]], dtype=torch.long)).logits[0, -1].double().tolist()
                cases.append({"prompt": prompt, "last_logits": last_logits, "greedy": greedy,
                              "final_logits": final_logits})
                print(f"{name}: prompt {len(prompt)} -> {greedy[:8]}...", flush=True)
            goldens["models"][name] = {"mkmodel_args": mk_args, "cases": cases}
    with open(args.out, "w") as f:
        json.dump(goldens, f)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
