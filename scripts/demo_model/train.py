#!/usr/bin/env python3
"""Trains the demo model that ships with kvtier (models/demo), on the GPU machine.

    python3 scripts/demo_model/train.py --corpus CORPUS_DIR --out OUT_DIR

CORPUS_DIR is what scripts/demo_model/build_corpus.sh writes (train.jsonl, valid.jsonl,
SOURCES.tsv). OUT_DIR gets the checkpoint as kvtier and transformers load it
(model.safetensors in bf16, config.json, generation_config.json, tokenizer.json,
tokenizer_config.json), the held-out text (heldout.txt, from the valid documents) and what
the tests compare kvtier against:
  - training.json: the settings, the loss curve, the valid loss of each candidate, and
    PyTorch's perplexity of heldout.txt (fp32 on the CPU, from the saved bf16 weights, scored
    in windows exactly as `kvtier perplexity --window W` does);
  - goldens.json: heldout.txt's token ids, and transformers' greedy continuations (token ids
    and text) of five prompts;
  - loss.png: the loss curves.

Steps: a byte-level BPE tokenizer (HF tokenizers) is trained on the train documents; every
document is encoded with <|endoftext|> in front (the tokenizer's template adds it, so it is
also the BOS kvtier puts before a prompt); the documents are concatenated and the model
(LlamaForCausalLM, tied embeddings, GQA) learns on random 512-token windows of that stream.
Each candidate shape below is trained for the same steps; the checkpoint with the lowest
valid loss seen at an evaluation (evaluations every EVAL_EVERY steps) is kept. Seeded: the same
corpus gives the same model on the same hardware and library versions.
"""
import argparse
import json
import math
import os
import random
import time

import numpy as np
import torch

SEED = 1234
VOCAB = 4096
CONTEXT = 512
EOT = "<|endoftext|>"
STEPS = 1200
BATCH = 48
EVAL_EVERY = 50
PEAK_LR = 1.5e-3
WARMUP = 60
# (name, hidden, layers, heads, kv_heads, intermediate)
CANDIDATES = [
    ("h384-l6", 384, 6, 6, 2, 1024),
    ("h256-l6", 256, 6, 4, 2, 768),
]
PROMPTS = [
    "The meaning of life is",
    "A computer is",
    "Never trust a man who",
    "The best way to learn",
    "Love is",
]
GOLDEN_NEW_TOKENS = 32
HELDOUT_CHARS = 6000


def train_tokenizer(docs):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"{EOT} $A", special_tokens=[(EOT, tok.token_to_id(EOT))])
    return tok


def make_model(shape, vocab):
    from transformers import LlamaConfig, LlamaForCausalLM
    _, hidden, layers, heads, kv_heads, inter = shape
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=CONTEXT,
                         rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         tie_word_embeddings=True, bos_token_id=0,
                         eos_token_id=0, attention_bias=False, mlp_bias=False)
    return LlamaForCausalLM(config)


def window_batches(stream, batch, gen):
    starts = torch.randint(0, len(stream) - CONTEXT - 1, (batch,), generator=gen)
    return torch.stack([stream[s:s + CONTEXT] for s in starts.tolist()])


@torch.no_grad()
def valid_loss(model, docs_ids, device):
    """Mean NLL per predicted token over the valid documents (each scored alone, BOS first,
    at most CONTEXT tokens). Batched with padding on the right: under causal attention the
    padding does not change the real positions, and its positions are not scored."""
    model.eval()
    docs = sorted((ids[:CONTEXT] for ids in docs_ids if len(ids) >= 2), key=len)
    total, count = 0.0, 0
    for i in range(0, len(docs), 64):
        group = docs[i:i + 64]
        width = max(map(len, group))
        x = torch.zeros((len(group), width), dtype=torch.long)
        labels = torch.full((len(group), width), -100, dtype=torch.long)
        for row, ids in enumerate(group):
            x[row, :len(ids)] = torch.tensor(ids)
            labels[row, :len(ids)] = torch.tensor(ids)
        x, labels = x.to(device), labels.to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x).logits.float()
        total += torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                                   ignore_index=-100, reduction="sum").item()
        count += sum(len(ids) - 1 for ids in group)
    model.train()
    return total / count


def train_one(shape, stream, valid_ids, vocab, device, log):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = make_model(shape, vocab).to(device)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=PEAK_LR, betas=(0.9, 0.95), fused=True)
    curve = {"step": [], "train_loss": [], "eval_step": [], "valid_loss": []}
    best = (float("inf"), -1, None)
    start = time.time()
    for step in range(1, STEPS + 1):
        lr = PEAK_LR * step / WARMUP if step <= WARMUP else \
            PEAK_LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - WARMUP) / (STEPS - WARMUP))))
        for group in opt.param_groups:
            group["lr"] = lr
        x = window_batches(stream, BATCH, gen).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve["step"].append(step)
        curve["train_loss"].append(loss.item())
        if step % EVAL_EVERY == 0 or step == STEPS:
            v = valid_loss(model, valid_ids, device)
            curve["eval_step"].append(step)
            curve["valid_loss"].append(v)
            log(f"{shape[0]} step {step} lr {lr:.2e} train {loss.item():.4f} valid {v:.4f} ({time.time() - start:.0f} s)")
            if v < best[0]:
                best = (v, step, {k: t.detach().clone() for k, t in model.state_dict().items()})
    model.load_state_dict(best[2])
    return model, {"name": shape[0], "parameters": params, "best_valid_loss": best[0], "best_step": best[1],
                   "seconds": time.time() - start, "curve": curve}


def windows_perplexity(model, ids, window):
    """What `kvtier perplexity --window W` computes: consecutive windows of W tokens, each
    scored alone (its first token unscored), NLL summed over all windows' scored tokens."""
    nll, scored = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, window):
            chunk = ids[start:start + window]
            if len(chunk) < 2:
                continue
            x = torch.tensor([chunk])
            logits = model(x).logits.double()
            nll += torch.nn.functional.cross_entropy(logits[0, :-1], x[0, 1:], reduction="sum").item()
            scored += len(chunk) - 1
    return {"window": window, "tokens": len(ids), "scored_tokens": scored, "mean_nll": nll / scored,
            "perplexity": math.exp(nll / scored)}


def plot(results, chosen, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for r in results:
        c = r["curve"]
        k = 25  # moving average of the noisy per-step train loss
        smooth = np.convolve(c["train_loss"], np.ones(k) / k, mode="valid")
        width = 2 if r["name"] == chosen else 1
        line, = ax.plot(c["step"][k - 1:], smooth, lw=width, label=f"{r['name']} train ({r['parameters'] / 1e6:.1f}M)")
        ax.plot(c["eval_step"], c["valid_loss"], "--", color=line.get_color(), lw=width, label=f"{r['name']} valid")
    ax.set_xlabel("step (%d windows of %d tokens)" % (BATCH, CONTEXT))
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"kvtier demo model: chosen {chosen} (lowest valid loss)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda"
    log_lines = []

    def log(msg):
        print(msg, flush=True)
        log_lines.append(msg)

    train_docs = [json.loads(l) for l in open(os.path.join(args.corpus, "train.jsonl"))]
    valid_docs = [json.loads(l) for l in open(os.path.join(args.corpus, "valid.jsonl"))]
    t0 = time.time()
    tok = train_tokenizer(train_docs)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    log(f"tokenizer: {vocab} tokens in {time.time() - t0:.0f} s")
    stream = torch.tensor([i for e in tok.encode_batch(train_docs) for i in e.ids], dtype=torch.long)
    valid_ids = [e.ids for e in tok.encode_batch(valid_docs)]
    log(f"train stream {len(stream)} tokens, valid {sum(map(len, valid_ids))} tokens in {len(valid_ids)} documents")

    results, best_model, best_result = [], None, None
    for shape in CANDIDATES:
        model, result = train_one(shape, stream, valid_ids, vocab, device, log)
        results.append(result)
        if best_result is None or result["best_valid_loss"] < best_result["best_valid_loss"]:
            best_model, best_result = model, result
    chosen = best_result["name"]
    log(f"chosen {chosen}: valid loss {best_result['best_valid_loss']:.4f} at step {best_result['best_step']}")

    # Save in bf16; every reference below comes from that saved checkpoint read back in fp32.
    best_model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    from transformers import LlamaForCausalLM
    ref = LlamaForCausalLM.from_pretrained(args.out, dtype=torch.float32).eval()
    ref.generation_config.do_sample = False
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 0, "do_sample": True, "temperature": 0.8, "top_k": 40,
                   "top_p": 0.95, "repetition_penalty": 1.1, "max_new_tokens": 64}, f, indent=2)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOT, "eos_token": EOT,
                   "model_max_length": CONTEXT}, f, indent=2)

    heldout = ""
    for doc in valid_docs:
        if len(heldout) + len(doc) + 2 > HELDOUT_CHARS:
            break
        heldout += doc + "\n\n"
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write(heldout)
    torch.set_num_threads(os.cpu_count() or 1)
    heldout_ids = tok.encode(heldout).ids
    ppl = windows_perplexity(ref, heldout_ids, CONTEXT - 1)
    log(f"held-out perplexity (PyTorch fp32 CPU): {ppl}")

    goldens = {"heldout_ids": heldout_ids, "greedy": []}
    from transformers import GenerationConfig
    gen_cfg = GenerationConfig(do_sample=False, max_new_tokens=GOLDEN_NEW_TOKENS, eos_token_id=0, pad_token_id=0,
                               bos_token_id=0)
    for prompt in PROMPTS:
        ids = tok.encode(prompt).ids
        with torch.no_grad():
            out = ref.generate(torch.tensor([ids]), generation_config=gen_cfg, output_logits=True,
                               return_dict_in_generate=True)
        new = out.sequences[0, len(ids):].tolist()
        # The gap between the two best logits at each step: a tiny gap is where another
        # implementation's rounding could pick the other token.
        margins = []
        for logits in out.logits:
            top = torch.topk(logits[0].double(), 2).values
            margins.append(round((top[0] - top[1]).item(), 5))
        if 0 in new:
            new = new[:new.index(0) + 1]
            margins = margins[:len(new)]
        text = tok.decode(new, skip_special_tokens=True)
        goldens["greedy"].append({"prompt": prompt, "prompt_ids": ids, "new_ids": new, "text": text,
                                  "min_margin": min(margins), "margins": margins})
        log(f"greedy: {prompt!r} -> {text!r} (min top-2 logit gap {min(margins):.4f})")
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        json.dump(goldens, f)

    import tokenizers
    import transformers
    summary = {
        "seed": SEED, "steps": STEPS, "batch_windows": BATCH, "context": CONTEXT, "peak_lr": PEAK_LR,
        "vocab": vocab, "train_tokens": len(stream), "chosen": chosen,
        "heldout_perplexity": ppl,
        "valid_perplexity": math.exp(best_result["best_valid_loss"]),
        "candidates": results,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "gpu": torch.cuda.get_device_name()},
        "log": log_lines,
    }
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(summary, f, indent=1)
    plot(results, chosen, os.path.join(args.out, "loss.png"))
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
