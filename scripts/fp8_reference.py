#!/usr/bin/env python3
"""Checks kvtier's FP8 (E4M3) checkpoints against torch, on the GPU machine (torch,
safetensors and transformers are installed there).

For each layout `kvtier mkmodel --fp8` writes (per-tensor, block, ct-tensor, ct-channel):
  1. Quantization, bit for bit: the same seed written as fp32 gives the unquantized values;
     torch quantizes them by the same rule (scale = amax / 448 over the tensor, 128x128 block
     or output channel; code = (w / scale) clamped to +-448 cast to torch.float8_e4m3fn) and
     every code byte and scale must equal what kvtier wrote.
  2. Logits: transformers' LlamaForCausalLM in fp32 on the weights dequantized by torch
     (code.float() * scale) decodes greedily; `kvtier run --logprobs 20` on the fp8 checkpoint
     must pick the same tokens, with each step's top-20 log-probabilities within --cpu-bound
     (CPU backend, fp32) or --cuda-bound (CUDA backend, 16-bit compute) of transformers'.
  3. For the block layout, transformers' own FineGrainedFP8 loader (from_pretrained on the
     fp8 directory, CUDA) is run too and its distance to kvtier reported (not asserted: it
     quantizes activations to fp8 per token group, kvtier computes them in 16 bits).
  4. transformers writes a FineGrainedFP8 checkpoint itself (from_pretrained on the fp32
     weights with FineGrainedFP8Config, then save_pretrained); kvtier loads that checkpoint and
     its logits are compared with transformers' own dequantizing read of it
     (FineGrainedFP8Config(dequantize=True)), within --cuda-bound.

    python3 scripts/fp8_reference.py --kvtier build/tools/kvtier/kvtier --work /tmp/fp8ref
Exit status 1 when a check fails; every measured distance is printed.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

LAYOUTS = ["per-tensor", "block", "ct-tensor", "ct-channel"]
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BLOCK = 128


def mkmodel(kvtier, out, seed, extra):
    subprocess.run([kvtier, "mkmodel", "--force", "--preset", "small-llama", "--seed", str(seed),
                    "--out", out] + extra, check=True, stdout=subprocess.DEVNULL)


def tile_amax(w, rows, cols):
    """amax over tiles of rows x cols (ragged edges included), shape [ceil(R/rows), ceil(C/cols)]."""
    R, C = w.shape
    gr, gc = -(-R // rows), -(-C // cols)
    padded = torch.zeros(gr * rows, gc * cols, dtype=w.dtype)
    padded[:R, :C] = w.abs()
    return padded.view(gr, rows, gc, cols).amax(dim=(1, 3))


def expand_scales(scale, layout, R, C):
    """Per-element scales [R, C] from the stored grid."""
    scale = scale.float()
    if layout == "block":
        return scale.repeat_interleave(BLOCK, 0)[:R].repeat_interleave(BLOCK, 1)[:, :C]
    if layout == "ct-channel":
        return scale.reshape(R, 1).expand(R, C)
    return scale.reshape(1, 1).expand(R, C)


def torch_quantize(w, layout):
    if layout == "block":
        amax = tile_amax(w, BLOCK, BLOCK)
    elif layout == "ct-channel":
        amax = w.abs().amax(dim=1, keepdim=True)
    else:
        amax = w.abs().amax().reshape(1, 1)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    codes = (w / expand_scales(scale, layout, *w.shape)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return codes, scale


def scale_name(layout, name):
    return name[: -len(".weight")] + (".weight_scale_inv" if layout == "block" else ".weight_scale")


def dequantized_state(fp8_tensors, layout):
    state = {}
    for name, t in fp8_tensors.items():
        if "weight_scale" in name or name.endswith("input_scale"):
            continue
        if t.dtype == torch.float8_e4m3fn:
            state[name] = t.float() * expand_scales(fp8_tensors[scale_name(layout, name)], layout, *t.shape)
        else:
            state[name] = t.float()
    return state


def check_codes(src_dir, fp8_dir, layout):
    src = load_file(os.path.join(src_dir, "model.safetensors"))
    ours = load_file(os.path.join(fp8_dir, "model.safetensors"))
    worst = []
    for name, w in src.items():
        if not any(p in name for p in PROJECTIONS):
            continue
        codes, scale = torch_quantize(w.float(), layout)
        if not torch.equal(codes.view(torch.uint8), ours[name].view(torch.uint8)):
            diff = (codes.view(torch.uint8) != ours[name].view(torch.uint8)).sum().item()
            worst.append(f"{name}: {diff} code bytes differ")
        if not torch.equal(scale.reshape(-1), ours[scale_name(layout, name)].float().reshape(-1)):
            worst.append(f"{name}: scales differ")
    return worst


def kvtier_logprobs(kvtier, model, prompt, steps, backend):
    out = subprocess.run([kvtier, "run", "--model", model, "--backend", backend, "--prompt-ids",
                          ",".join(map(str, prompt)), "--max-tokens", str(steps), "--temperature", "0",
                          "--ignore-eos", "--logprobs", "20", "--json"], check=True, capture_output=True, text=True)
    seq = json.loads(out.stdout)["sequences"][0]
    return [(step["token"], {a["token"]: a["logprob"] for a in step["top"]}) for step in seq["logprobs"]]


def torch_steps(model, prompt, tokens):
    ids = torch.tensor([prompt + tokens], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp[len(prompt) - 1: len(prompt) - 1 + len(tokens)].cpu()


def distance(ours, reference_logp):
    """Greedy agreement and max |logprob difference| over each step's kvtier top-20."""
    same, worst = True, 0.0
    for t, (token, top) in enumerate(ours):
        same &= int(reference_logp[t].argmax()) == token
        for k, lp in top.items():
            worst = max(worst, abs(lp - float(reference_logp[t][k])))
    return same, worst


def check_transformers_written(args, src, prompt):
    """transformers writes the FineGrainedFP8 checkpoint itself (block-wise weight_scale_inv,
    quantized from the fp32 weights by its own FineGrainedFP8Config), kvtier loads it, and
    transformers reads it back dequantized (FineGrainedFP8Config(dequantize=True): its own
    reading of the layout, computed in fp32 without fp8 kernels). Greedy tokens must agree
    and each step's top-20 log-probabilities stay within --cuda-bound (transformers may
    round the dequantized weights to 16 bits). Returns the number of failures."""
    import shutil
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
    out = os.path.join(args.work, "hf-finegrained")
    try:
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16, device_map="cuda",
                                                     quantization_config=FineGrainedFP8Config())
        model.save_pretrained(out)
        del model
        for name in os.listdir(src):  # the tokenizer files, not the config or the weights
            if name.startswith("tokenizer") or name == "special_tokens_map.json":
                shutil.copy(os.path.join(src, name), out)
        with open(os.path.join(out, "config.json")) as f:
            qc = json.load(f).get("quantization_config", {})
        print(f"transformers-written: quantization_config {qc}")
        ref = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, device_map="cuda",
                                                   quantization_config=FineGrainedFP8Config(dequantize=True)).eval()
    except Exception as e:
        print(f"transformers-written: transformers could not write or read its checkpoint: {e}")
        return 1
    failures = 0
    for backend in args.backends.split(","):
        ours = kvtier_logprobs(args.kvtier, out, prompt, args.steps, backend)
        same, worst = distance(ours, torch_steps(ref, prompt, [t for t, _ in ours]))
        ok = same and worst <= args.cuda_bound
        print(f"transformers-written: kvtier {backend} vs transformers (dequantize=True): greedy "
              f"{'same' if same else 'DIFFERENT'}, max |dlogprob| {worst:.2e} (bound {args.cuda_bound}) {'ok' if ok else 'FAIL'}")
        failures += not ok
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvtier", required=True)
    ap.add_argument("--work", default="/tmp/kvtier-fp8-reference")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--cpu-bound", type=float, default=2e-3)
    ap.add_argument("--cuda-bound", type=float, default=0.15)
    ap.add_argument("--backends", default="cpu,cuda")
    args = ap.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    failures = 0
    src = os.path.join(args.work, "fp32")
    mkmodel(args.kvtier, src, args.seed, ["--dtype", "fp32"])
    prompt = [11, 400, 7, 3001, 42, 5, 999, 18]
    for layout in LAYOUTS:
        fp8 = os.path.join(args.work, layout)
        mkmodel(args.kvtier, fp8, args.seed, ["--dtype", "bf16", "--fp8", layout])
        bad = check_codes(src, fp8, layout)
        print(f"{layout}: codes and scales vs torch float8_e4m3fn: {'identical' if not bad else bad[:5]}")
        failures += bool(bad)

        config = AutoConfig.from_pretrained(fp8)
        config.quantization_config = None
        if hasattr(config, "__dict__"):
            config.__dict__.pop("quantization_config", None)
        reference = LlamaForCausalLM(config).float().eval()
        missing, unexpected = reference.load_state_dict(dequantized_state(load_file(os.path.join(fp8, "model.safetensors")), layout), strict=False)
        if [m for m in missing if "rotary" not in m] or unexpected:
            print(f"{layout}: state dict mismatch: missing {missing} unexpected {unexpected}")
            failures += 1
            continue
        for backend in args.backends.split(","):
            if backend == "cuda" and not torch.cuda.is_available():
                continue
            ours = kvtier_logprobs(args.kvtier, fp8, prompt, args.steps, backend)
            ref = torch_steps(reference, prompt, [t for t, _ in ours])
            same, worst = distance(ours, ref)
            bound = args.cpu_bound if backend == "cpu" else args.cuda_bound
            ok = same and worst <= bound
            print(f"{layout}: kvtier {backend} vs torch fp32 on dequantized weights: greedy "
                  f"{'same' if same else 'DIFFERENT'}, max |dlogprob| {worst:.2e} (bound {bound}) {'ok' if ok else 'FAIL'}")
            failures += not ok
        if layout == "block" and torch.cuda.is_available():
            try:
                hf = AutoModelForCausalLM.from_pretrained(fp8, device_map="cuda").eval()
                ours = kvtier_logprobs(args.kvtier, fp8, prompt, args.steps, "cpu")
                same, worst = distance(ours, torch_steps(hf, prompt, [t for t, _ in ours]))
                print(f"block: transformers FineGrainedFP8 vs kvtier cpu: greedy {'same' if same else 'different'}, "
                      f"max |dlogprob| {worst:.2e} (reported, not asserted)")
            except Exception as e:  # the comparison is informational
                print(f"block: transformers FineGrainedFP8 could not run: {e}")
    if torch.cuda.is_available():
        failures += check_transformers_written(args, src, prompt)
    print("FAILED" if failures else "all fp8 reference checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
