#!/usr/bin/env python3
"""The CLI's operational output: progress on stderr when it is not a terminal (plain lines
for mkmodel, model loading and context creation; nothing on stdout), the library's warnings
on stderr (KVTIER_LOG), and `kvtier inspect`
showing the request defaults from generation_config.json (and refusing a bad value).

Usage: cli_ops_test.py KVTIER_CLI WORK_DIR
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys


def main() -> int:
    cli, work = sys.argv[1], pathlib.Path(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    model = work / "model"
    made = subprocess.run([cli, "mkmodel", "--preset", "tiny-llama", "--seed", "3", "--out", str(model)],
                          capture_output=True, text=True, check=True)
    expect(re.search(r"^writing .*: weights [0-9.]+/[0-9.]+ MiB \([0-9.]+ s\)$", made.stderr, re.M),
           f"mkmodel: a progress line for the weights on stderr, got {made.stderr!r}")
    expect("\r" not in made.stderr and "\033" not in made.stderr, "mkmodel: no terminal codes when piped")

    run = subprocess.run([cli, "run", "--model", str(model), "--backend", "cpu", "--threads", "2",
                          "--prompt-ids", "1,2,3", "--max-tokens", "2", "--json"],
                         capture_output=True, text=True, check=True)
    json.loads(run.stdout)  # stdout stays one JSON object
    for stage in ("tensors", "weights", "kv_pools", "warmup"):
        expect(re.search(rf"^loading model: {stage} .*\([0-9.]+ s\)$", run.stderr, re.M),
               f"run: a line for the stage {stage}, got {run.stderr!r}")

    # The library's warnings reach stderr through the CLI's log callback (KVTIER_LOG).
    args = [cli, "run", "--model", str(model), "--backend", "cpu", "--threads", "2", "--prompt-ids", "1,2",
            "--max-tokens", "1", "--host-kv-bytes", "100"]
    warned = subprocess.run(args, capture_output=True, text=True, check=True)
    expect(re.search(r"^kvtier: warning: host tier disabled: host_kv_bytes 100 holds no KV block of [0-9]+ bytes$",
                     warned.stderr, re.M), f"run: the disabled tier's warning, got {warned.stderr!r}")
    quiet = subprocess.run(args, capture_output=True, text=True, check=True, env={"KVTIER_LOG": "off"})
    expect("host tier" not in quiet.stderr, f"KVTIER_LOG=off: {quiet.stderr!r}")

    (model / "generation_config.json").write_text(
        json.dumps({"do_sample": True, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [2, 5]}))
    inspect = subprocess.run([cli, "inspect", "--model", str(model), "--json"], capture_output=True, text=True,
                             check=True)
    defaults = json.loads(inspect.stdout)["generation_defaults"]
    expect(defaults == {"do_sample": True, "temperature": 0.6, "top_k": 50, "top_p": 0.9, "repetition_penalty": 1.0, "max_new_tokens": 16,
                        "eos_token_ids": [2, 5],
                        "from_generation_config": ["do_sample", "temperature", "top_p", "eos_token_id"]},
           f"inspect: generation defaults, got {defaults}")
    text = subprocess.run([cli, "inspect", "--model", str(model)], capture_output=True, text=True, check=True).stdout
    expect(re.search(r"^generation_defaults\s+\{.*\"top_k\":50", text, re.M), f"inspect text: {text!r}")

    (model / "generation_config.json").write_text(json.dumps({"do_sample": True, "top_p": 2}))
    bad = subprocess.run([cli, "inspect", "--model", str(model)], capture_output=True, text=True)
    expect(bad.returncode == 1 and "generation_config.json: field top_p" in bad.stderr,
           f"inspect of a bad top_p: {bad.returncode} {bad.stderr!r}")
    bad_run = subprocess.run([cli, "run", "--model", str(model), "--backend", "cpu", "--prompt-ids", "1"],
                             capture_output=True, text=True)
    expect(bad_run.returncode == 1 and "top_p" in bad_run.stderr, f"run on a bad top_p: {bad_run.stderr!r}")

    print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
