#!/usr/bin/env bash
# CLI tests: run the built `kvtier` and assert, for each case, its exit status and the exact
# message (kvtier(1), EXIT STATUS; one form for every error: "kvtier <command>: <what>").
# usage: cli_test.sh KVTIER SOURCE_DIR WORK_DIR GROUP
#   GROUP: help | usage | options | mkmodel | run | signal | bench | gguf
# The gguf group reads the demo model's GGUF the build writes from $KVTIER_DEMO_GGUF.
# Each group prints one line per check and fails (exit 1) when any check fails.
set -uo pipefail
kvtier=${1:?usage: cli_test.sh KVTIER SOURCE_DIR WORK_DIR GROUP}
src=${2:?source dir}
work=${3:?work dir}
group=${4:?group}
mkdir -p "$work"
work=$(cd "$work" && pwd)
failures=0
checks=0

fail() {
  echo "FAIL: $*"
  echo "  stdout: $(head -c 2000 "$work/out")"
  echo "  stderr: $(head -c 2000 "$work/err")"
  failures=$((failures + 1))
}

# run ARGS...: runs kvtier, stdout -> $work/out, stderr -> $work/err, status -> $status.
run() {
  "$kvtier" "$@" >"$work/out" 2>"$work/err" </dev/null
  status=$?
}

# expect STATUS out|err LINE ARGS...: the exit status is STATUS and the stream holds LINE
# as one whole line.
expect() {
  local want=$1 stream=$2 line=$3
  shift 3
  checks=$((checks + 1))
  run "$@"
  if [ "$status" -ne "$want" ]; then
    fail "kvtier $*: exit status $status, expected $want"
  elif ! grep -qxF -- "$line" "$work/$stream"; then
    fail "kvtier $*: no line '$line' on std$stream"
  else
    echo "ok: kvtier $* -> $status: $line"
  fi
}

# expect_re STATUS out|err REGEX ARGS...: as expect, with an extended regular expression
# matched against each line.
expect_re() {
  local want=$1 stream=$2 regex=$3
  shift 3
  checks=$((checks + 1))
  run "$@"
  if [ "$status" -ne "$want" ]; then
    fail "kvtier $*: exit status $status, expected $want"
  elif ! grep -qE -- "$regex" "$work/$stream"; then
    fail "kvtier $*: nothing matches /$regex/ on std$stream"
  else
    echo "ok: kvtier $* -> $status"
  fi
}

# usage_error COMMAND MESSAGE ARGS...: exit status 2, the message, then the pointer to --help.
usage_error() {
  local command=$1 message=$2
  shift 2
  local before=$failures
  expect 2 err "kvtier $command: $message" "$command" "$@"
  if [ "$failures" -eq "$before" ] && ! grep -qxF "Try 'kvtier $command --help'." "$work/err"; then
    fail "kvtier $command $*: no pointer to --help"
  fi
}

# check DESCRIPTION CONDITION...: a plain assertion.
check() {
  local what=$1
  shift
  checks=$((checks + 1))
  if "$@"; then echo "ok: $what"; else fail "$what"; fi
}

# The tiny random model the groups share (written by mkmodel: tested in its own group).
model=$work/model
make_model() {
  "$kvtier" mkmodel --force --preset tiny-llama --seed 7 --out "$model" >/dev/null 2>&1 || {
    echo "FAIL: cannot make the test model"
    exit 1
  }
}

finish() {
  echo "$group: $((checks - failures)) of $checks checks passed"
  [ "$failures" -eq 0 ]
  exit $?
}

case $group in
help)
  expect_re 0 out '^exit status:$' --help
  expect_re 0 out '^  130  interrupted by SIGINT' -h
  expect_re 2 err '^usage: kvtier <command>' # no command: usage on stderr
  expect 2 err "kvtier: unknown command 'nosuch'" nosuch
  commands=$("$kvtier" --help | awk '/^commands:/{c=1; next} c&&/^  [a-z]/{print $1} /^$/{if(c) c=0}')
  check "kvtier --help lists commands" test -n "$commands"
  for c in $commands; do
    for h in -h --help; do
      expect_re 0 out "^Usage: kvtier $c " "$c" "$h"
      check "kvtier $c $h writes nothing on stderr" test ! -s "$work/err"
    done
  done
  for c in run mkmodel bench inspect tokenize detokenize; do
    check "kvtier --help lists $c" grep -qw "$c" <<<"$commands"
  done
  ;;

usage)
  m=/nonexistent/model  # parsing fails before the model is opened
  usage_error run "--max-tokens: 4294967297 is out of range [1, 2147483647]" --model $m --prompt-ids 1 --max-tokens 4294967297
  usage_error run "--max-tokens: -5 is out of range [1, 2147483647]" --model $m --prompt-ids 1 --max-tokens -5
  usage_error run "--max-tokens: 99999999999999999999999 is out of range [1, 2147483647]" --model $m --prompt-ids 1 --max-tokens 99999999999999999999999
  usage_error run "--max-tokens: '0x10' is not an integer" --model $m --prompt-ids 1 --max-tokens 0x10
  usage_error run "--max-tokens: '1e3' is not an integer" --model $m --prompt-ids 1 --max-tokens 1e3
  usage_error run "--max-tokens: needs a value (N)" --model $m --prompt-ids 1 --max-tokens
  usage_error run "--max-tokens: given more than once" --model $m --prompt-ids 1 --max-tokens 1 --max-tokens 2
  usage_error run "--seed: -1 is out of range [0, 9223372036854775807]" --model $m --prompt-ids 1 --seed -1
  usage_error run "--top-p: 0 is out of range (0, 1]" --model $m --prompt-ids 1 --top-p 0
  usage_error run "--top-p: 1.5 is out of range (0, 1]" --model $m --prompt-ids 1 --top-p 1.5
  usage_error run "--temperature: 'nan' is not a number" --model $m --prompt-ids 1 --temperature nan
  usage_error run "--temperature: -1 is out of range [0, 3.4e+38]" --model $m --prompt-ids 1 --temperature -1
  usage_error run "--gpu-kv-bytes: '-1' is not a byte size (e.g. 4096, 64MiB, 1.5GiB)" --model $m --prompt-ids 1 --gpu-kv-bytes -1
  usage_error run "--gpu-kv-bytes: 9999999999TiB is out of range [0, 9223372036854775807]" --model $m --prompt-ids 1 --gpu-kv-bytes 9999999999TiB
  usage_error run "--host-kv-bytes: 8589934592GiB is out of range [0, 9223372036854775807]" --model $m --prompt-ids 1 --host-kv-bytes 8589934592GiB
  usage_error run "--disk-kv-bytes: 18446744073709551616 is out of range [0, 9223372036854775807]" --model $m --prompt-ids 1 --disk-kv-bytes 18446744073709551616
  usage_error run "--gpu-mem-limit: '12XB' is not a byte size (e.g. 4096, 64MiB, 1.5GiB)" --model $m --prompt-ids 1 --gpu-mem-limit 12XB
  usage_error run "--block-tokens: 0 is out of range [1, 1024]" --model $m --prompt-ids 1 --block-tokens 0
  usage_error run "--cuda-graphs: 2 is out of range [0, 1]" --model $m --prompt-ids 1 --cuda-graphs 2
  usage_error run "--backend: 'gpu' is not one of auto|cpu|cpu-reference|cuda" --model $m --prompt-ids 1 --backend gpu
  usage_error run "--prompt-ids: '1,,2' has an empty item" --model $m --prompt-ids 1,,2
  usage_error run "--prompt-ids: 2147483648 is out of range [0, 2147483647]" --model $m --prompt-ids 1,2147483648
  usage_error run "--stop-id: -3 is out of range [0, 2147483647]" --model $m --prompt-ids 1 --stop-id -3
  usage_error run "unknown option --bogus" --model $m --prompt-ids 1 --bogus
  usage_error run "unknown option --bogus" --model $m --prompt-ids 1 --bogus=3
  usage_error run "unexpected argument 'stray'" --model $m --prompt-ids 1 stray
  usage_error run "unexpected argument '3,4'" --model $m --prompt-ids 1,2 3,4
  usage_error run "--json takes no value" --model $m --prompt-ids 1 --json=1
  usage_error run "--metrics: needs a value (FILE)" --model $m --prompt-ids 1 --metrics
  usage_error run "--model is required" --prompt-ids 1
  usage_error run "give at least one --prompt-ids or --prompt" --model $m
  usage_error mkmodel "--layers: -1 is out of range [1, 2147483647]" --out "$work/unused" --layers -1
  usage_error mkmodel "--threads: 5000 is out of range [0, 4096]" --out "$work/unused" --threads 5000
  usage_error mkmodel "--shard-bytes: 99999999999999999999 is out of range [0, 9223372036854775807]" --out "$work/unused" --shard-bytes 99999999999999999999
  usage_error mkmodel "--dtype: 'fp8' is not one of bf16|fp16|fp32" --out "$work/unused" --dtype fp8
  usage_error mkmodel "--tokenizer bytes needs --vocab >= 258" --out "$work/unused" --tokenizer bytes --vocab 100
  usage_error mkmodel "unexpected argument 'extra'" --out "$work/unused" extra
  usage_error mkmodel "--out is required"
  check "no usage error wrote anything" test ! -e "$work/unused"
  usage_error inspect "unexpected argument 'dir'" --model "$work" dir
  usage_error tokenize "unknown option --special" --tokenizer x --special
  usage_error detokenize "--tokenizer is required"
  usage_error bench "--workload: unknown workload 'W10' (W1..W9, W6b, W6c, W9a, W9b, C<N>, all)" --workload W1,W10
  usage_error bench "--time-limit: 0 is out of range (0, 1e+06]" --time-limit 0
  ;;

options)
  # Every context option key kvtier.h documents is a flag of `kvtier run`, named after it.
  header=$src/include/kvtier/kvtier.h
  keys=$(awk '/^typedef struct kvt_options kvt_options;/{exit} /Context options/{on=1} on' "$header" |
    grep -oE '^ \*   "[a-z_]+"' | grep -oE '[a-z_]+')
  check "kvtier.h documents context option keys" test "$(wc -w <<<"$keys")" -ge 12
  run run --help
  for key in $keys; do
    flag="--${key//_/-}"
    checks=$((checks + 1))
    if grep -qE -- "^ +$flag( |$)" "$work/out"; then echo "ok: run has $flag ($key)"; else fail "run has no $flag for option $key"; fi
  done
  make_model
  # The library's messages name the flags (its option keys, rewritten), and those flags exist.
  expect_re 2 err '^kvtier run: .*--gpu-kv-bytes 0 .*needs --gpu-mem-limit > 0$' run --model "$model" --prompt-ids 1,2 --backend cpu --gpu-kv-bytes 0
  expect_re 0 out '^seq 1 \[length\]: ' run --model "$model" --prompt-ids 1,2 --backend cpu --gpu-kv-bytes 0 --gpu-mem-limit 64MiB --max-tokens 2 --events
  expect_re 2 err '^kvtier run: .*--disk-kv-bytes > 0 needs a --disk-path$' run --model "$model" --prompt-ids 1,2 --backend cpu --disk-kv-bytes 1MiB
  expect_re 0 out '^seq 1 \[length\]: ' run --model "$model" --prompt-ids 1,2 --backend cpu --max-waiting 4 --max-running 1 --events \
    --threads 1 --block-tokens 4 --max-tokens-per-step 8 --preemption recompute --cuda-graphs 0 --cuda-fast-attention 0 \
    --cuda-pdl 0 --cuda-pdl-early 0 --cuda-gemv-prefetch 8 --max-tokens 3
  # Tensor parallelism: TP = 2 writes the tokens TP = 1 writes on the sharded plan, and says
  # so; a degree the model's 2 KV heads do not split, or the CUDA backend, is refused by name.
  expect_re 0 err 'tensor parallel 2 \(sharded plan\)$' run --model "$model" --prompt-ids 1,2,3 --backend cpu --max-tokens 6 \
    --tensor-parallel 2
  cp "$work/out" "$work/tp2"
  run run --model "$model" --prompt-ids 1,2,3 --backend cpu --max-tokens 6 --sharded-reduction 1
  check "run --tensor-parallel 2 writes what --sharded-reduction 1 writes" cmp -s "$work/out" "$work/tp2"
  expect_re 2 err '^kvtier run: .*--tensor-parallel 4: num_key_value_heads \(2\) is not divisible by it$' \
    run --model "$model" --prompt-ids 1,2 --backend cpu --tensor-parallel 4
  usage_error run "--tensor-parallel: '3' is not one of 1|2|4|8" --model "$model" --prompt-ids 1,2 --tensor-parallel 3
  expect_re 1 err '^kvtier run: .*--tensor-parallel 2 on the cuda backend is not yet implemented' \
    run --model "$model" --prompt-ids 1,2 --backend cuda --tensor-parallel 2 --devices 0,1
  ;;

mkmodel)
  out=$work/fresh
  rm -rf "$out" "$work/real" "$work/a-file"
  expect_re 0 out "^wrote $out: " mkmodel --out "$out"
  check "mkmodel wrote config.json and weights" test -f "$out/config.json" -a -f "$out/model.safetensors"
  before=$(cd "$out" && sha256sum * | sort)
  expect 1 err "kvtier mkmodel: --out: $out is not empty; pass --force to write into it (only the files mkmodel writes are replaced, nothing is deleted)" mkmodel --out "$out" --seed 9
  check "a refused mkmodel changed nothing" test "$(cd "$out" && sha256sum * | sort)" = "$before"

  # A "real" sharded checkpoint with files mkmodel never writes.
  real=$work/real
  "$kvtier" mkmodel --out "$real" --shard-bytes 64KiB --seed 3 >/dev/null
  echo '{"user": "file"}' >"$real/tokenizer_extra.json"
  echo "a model card" >"$real/README.md"
  before=$(cd "$real" && sha256sum * | sort)
  nfiles=$(ls "$real" | wc -l)
  check "the sharded checkpoint has several shards" test "$nfiles" -gt 5
  expect 1 err "kvtier mkmodel: --out: $real is not empty; pass --force to write into it (only the files mkmodel writes are replaced, nothing is deleted)" mkmodel --out "$real"
  check "without --force every file is intact" test "$(cd "$real" && sha256sum * | sort)" = "$before"
  # --force with a single-file write: the index is not mkmodel's to delete, so it refuses.
  expect 1 err "kvtier mkmodel: $real/model.safetensors.index.json exists and would shadow the model.safetensors written here; it is not deleted: remove it or write the checkpoint elsewhere" mkmodel --force --out "$real"
  check "a refused --force changed nothing" test "$(cd "$real" && sha256sum * | sort)" = "$before"
  # --force with the same layout replaces only its own files, says which, deletes nothing.
  expect_re 0 err "^kvtier mkmodel: replacing $real/model.safetensors.index.json$" mkmodel --force --out "$real" --shard-bytes 64KiB --seed 4
  check "the files mkmodel does not write survive --force" grep -qx "a model card" "$real/README.md"
  check "... all of them" grep -q user "$real/tokenizer_extra.json"
  check "no file disappeared" test "$(ls "$real" | wc -l)" -eq "$nfiles"
  check "the weights were rewritten (new seed)" test "$(cd "$real" && sha256sum * | sort)" != "$before"
  expect_re 0 out '^fingerprint ' inspect --model "$real"
  touch "$work/a-file"
  expect 1 err "kvtier mkmodel: --out: $work/a-file exists and is not a directory" mkmodel --out "$work/a-file"
  # FP8 checkpoints in the layouts users download; inspect names the layout and the CPU
  # backend runs them (weights dequantized).
  for layout in per-tensor block ct-tensor ct-channel; do
    rm -rf "$work/fp8-$layout"
    expect_re 0 out "^wrote $work/fp8-$layout: " mkmodel --out "$work/fp8-$layout" --fp8 "$layout" --dtype bf16
  done
  expect_re 0 out '^quantization +fp8 e4m3, per-tensor weight_scale, dynamic activation scales$' inspect --model "$work/fp8-per-tensor"
  expect_re 0 out '^quantization +fp8 e4m3, block-wise 128x128 weight_scale_inv, dynamic activation scales$' inspect --model "$work/fp8-block"
  expect_re 0 out '^quantization +compressed-tensors float-quantized fp8 e4m3, per-channel weight_scale' inspect --model "$work/fp8-ct-channel"
  expect_re 0 out '^[0-9]+ [0-9]+$' run --model "$work/fp8-block" --backend cpu --prompt-ids 1,2,3 --max-tokens 2
  sed -i 's/"quant_method": "fp8"/"quant_method": "awq"/' "$work/fp8-per-tensor/config.json"
  expect_re 1 err "quant_method 'awq' is not supported" inspect --model "$work/fp8-per-tensor"
  # Mixture of experts: inspect shows the experts, the CPU backend runs them, the CUDA
  # backend refuses by name the shapes its expert kernels do not take, and a top-k above the
  # expert count is refused.
  rm -rf "$work/moe"
  expect_re 0 out "^wrote $work/moe: Qwen3MoeForCausalLM, " mkmodel --out "$work/moe" --arch qwen3moe --experts 6 \
    --experts-per-token 2 --dense-layers 1
  expect_re 0 out '^experts +\{"count":6,"per_token":2,"intermediate_size":128,"norm_topk_prob":true,"layers":\[0\],"active_parameters":[0-9]+\}$' \
    inspect --model "$work/moe"
  expect_re 0 out '^[0-9]+ [0-9]+$' run --model "$work/moe" --backend cpu --prompt-ids 1,2,3 --max-tokens 2
  rm -rf "$work/moe-odd"
  expect_re 0 out "^wrote $work/moe-odd: Qwen3MoeForCausalLM, " mkmodel --out "$work/moe-odd" --arch qwen3moe \
    --experts 6 --experts-per-token 2 --expert-intermediate 40
  expect_re 1 err "Qwen3MoeForCausalLM hidden size [0-9]+ and expert intermediate size 40 must be multiples of 16; use --backend cpu$" \
    run --model "$work/moe-odd" --backend cuda --prompt-ids 1,2,3 --max-tokens 2
  usage_error mkmodel "config field 'num_experts_per_tok' (3) exceeds the number of experts 'num_local_experts' (2)" \
    --out "$work/unused" --arch mixtral --experts 2 --experts-per-token 3
  ;;

run)
  make_model
  # The output as it comes: one sequence's straight to stdout (token ids: the model has no
  # tokenizer), several as one plain line each when piped; --events: a line per event, then
  # a summary.
  run run --model "$model" --backend cpu --prompt-ids 1,2,3 --max-tokens 4 --ignore-eos
  check "run: one sequence's tokens, one line" grep -qxE '[0-9]+ [0-9]+ [0-9]+ [0-9]+' "$work/out"
  check "... and nothing else" test "$(wc -l <"$work/out")" -eq 1
  run run --model "$model" --backend cpu --prompt-ids 1,2,3 --prompt-ids 4,5 --max-tokens 3 --ignore-eos
  check "run: two sequences, a line each" test "$(grep -cE '^seq [12] ✓ \| [0-9]+ [0-9]+ [0-9]+$' "$work/out")" -eq 2
  expect_re 0 out '^seq 1 \[length\]: [0-9]+ [0-9]+ [0-9]+ [0-9]+$' run --model "$model" --backend cpu --prompt-ids 1,2,3 --max-tokens 4 --events
  check "--events: a line per token" test "$(grep -cE '^seq 1: token [0-9]+$' "$work/out")" -eq 4
  usage_error run "give at most one of --live, --json and --events" --model "$model" --prompt-ids 1 --json --events
  expect_re 0 out '"finish_reason": "length"' run --model "$model" --backend cpu --prompt-ids 1,2,3 --prompt-ids 4 --max-tokens 2 --json
  expect_re 2 err '^kvtier run: sequence 0: .*vocab' run --model "$model" --backend cpu --prompt-ids 1,2,999999 --max-tokens 2
  expect_re 1 err '^kvtier run: ' run --model "$work/no-such-model" --prompt-ids 1
  expect 1 err "kvtier run: --metrics: cannot write $work/no-such-dir/m.prom" run --model "$model" --backend cpu \
    --prompt-ids 1,2 --max-tokens 1 --metrics "$work/no-such-dir/m.prom"
  expect 0 out 'kvtier_generated_tokens_total 1' run --model "$model" --backend cpu --prompt-ids 1,2 \
    --max-tokens 1 --ignore-eos --json --metrics -
  # The remote tier across processes: a redis-server of this test's own on a loopback port;
  # a second process finds the prompt's blocks the first stored, with the same tokens.
  if command -v redis-server >/dev/null 2>&1; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >/dev/null 2>&1 &
    redis_pid=$!
    for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    prompt=$(seq -s, 1 40)
    # Every block Redis holds is loaded (--load-or-recompute 0): the count of hits is exact.
    remote=(run --model "$model" --backend cpu --prompt-ids "$prompt" --max-tokens 4 --ignore-eos
      --remote-kv-url "redis://127.0.0.1:$port" --load-or-recompute 0 --json)
    run "${remote[@]}"
    first=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["sequences"][0]["tokens"])' <"$work/out")
    run "${remote[@]}"
    second=$(python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["sequences"][0]["tokens"], j["stats"]["prefix_hits"]["remote"])' <"$work/out")
    check "remote tier: a second process finds the first's blocks, same tokens" test "$second" = "$first 2"
    kill "$redis_pid"
    wait "$redis_pid" 2>/dev/null
    expect_re 0 err '^kvtier: warning: remote KV tier: redis 127\.0\.0\.1:[0-9]+: .*switched off' "${remote[@]}"
  else
    echo "skip: remote tier across processes: redis-server is not installed (scripts/install-deps.sh installs it)"
  fi
  ;;

signal)
  make_model
  # A long generation with a disk tier, interrupted once it streams: the sequences are
  # cancelled, the context freed (which saves the cache and its index), exit 128 + signal.
  prompt=$(seq -s, 1 64)
  for sig in INT TERM; do
    disk=$work/kv-$sig.disk
    rm -f "$disk" "$disk".*
    : >"$work/out"  # the wait below must not see the previous run's tokens
    "$kvtier" run --model "$model" --backend cpu --prompt-ids "$prompt" --max-tokens 1900 --ignore-eos \
      --prompt-ids "$prompt,3" --prompt-ids "$prompt,4" --prompt-ids "$prompt,5" --prompt-ids "$prompt,6" \
      --prompt-ids "$prompt,7" --prompt-ids "$prompt,8" --prompt-ids "$prompt,9" \
      --max-running 1 --max-tokens-per-step 16 --disk-kv-bytes 8MiB --disk-path "$disk" --events \
      >"$work/out" 2>"$work/err" &
    pid=$!
    for _ in $(seq 1 600); do
      grep -q ': token ' "$work/out" 2>/dev/null && break
      sleep 0.1
    done
    kill -s "$sig" "$pid"
    wait "$pid"
    status=$?
    checks=$((checks + 1))
    want=$([ "$sig" = INT ] && echo 130 || echo 143)
    if [ "$status" -eq "$want" ] &&
      grep -qxF "kvtier run: interrupted by SIG$sig: sequences cancelled, context freed (disk cache saved)" "$work/err"; then
      echo "ok: SIG$sig -> exit $status, context freed"
    else
      fail "SIG$sig: exit status $status (expected $want) or no interruption message"
    fi
    check "SIG$sig: sequences reported cancelled" grep -q '^seq [0-9]* \[cancelled\]' "$work/out"
    check "SIG$sig: the disk tier's index was written" test -s "$disk.index"
    # The restart loads whatever it finds (--load-or-recompute 0): the check is that the saved
    # blocks are there, not whether reading them beats recomputing the tiny model, which a
    # slow first disk read on a loaded machine can decide either way.
    expect_re 0 out '^steps .*prefix hits gpu/host/disk 0/0/[1-9][0-9]*,' run --model "$model" --backend cpu \
      --prompt-ids "$prompt" --max-tokens 1 --disk-kv-bytes 8MiB --disk-path "$disk" --load-or-recompute 0 --events
  done
  ;;

bench)
  make_model
  usage_error bench "W1-W6 need --model DIR (a Llama-3-8B-shape checkpoint) or --make-model DIR (writes a random one, about 15 GiB, into DIR/llama3-8b)"
  usage_error bench "W7 needs --w7-cache DIR or --make-model DIR (for its GGUF files)" --workload W7
  usage_error bench "W5, W6, W6b and W6c need --tier-dir DIR for their disk-tier files (32.0 GiB for W5, 16.0 GiB for W6, 4.0 GiB for W6c)" --workload W5 --model "$model"
  usage_error bench "C<N> needs --tier-dir DIR for its disk-tier file (8.0 GiB)" --workload C1 --model "$model"
  usage_error bench "C<N> on the cpu backend needs --small-model DIR or --make-model DIR" --workload C0,C1 --backend cpu \
    --tier-dir "$work/unused"
  expect 1 err "kvtier bench: --model: $work/nowhere is neither a checkpoint directory (it holds no config.json) nor a GGUF file" bench --workload W1 --model "$work/nowhere"
  rm -rf "$work/occupied" && mkdir -p "$work/occupied/small-llama" && echo notes >"$work/occupied/small-llama/notes.txt"
  expect 1 err "kvtier bench: $work/occupied/small-llama is not empty and holds no complete small-llama checkpoint (config.json is missing); bench writes a checkpoint only into an empty directory: remove it or pass another --make-model DIR" bench --workload C0 --backend cpu --tier-dir "$work/unused" --make-model "$work/occupied"
  check "bench left the occupied directory alone" test "$(ls "$work/occupied/small-llama")" = notes.txt
  # Not enough room: a file system with less free space than W5's disk tier, if there is one.
  small_fs=""
  for d in /dev /dev/shm /run /tmp "$work"; do
    avail=$(df -B1 --output=avail "$d" 2>/dev/null | tail -1 | tr -d ' ')
    if [ -n "$avail" ] && [ "$avail" -lt $((32 << 30)) ] && [ -d "$d" ]; then small_fs=$d; break; fi
  done
  if [ -n "$small_fs" ]; then
    tiers=$small_fs/kvtier-cli-test-never-written
    expect_re 1 err "^kvtier bench: not enough free space on the file system of $small_fs: .* free, up to 32.0 GiB needed \(checkpoints \+ the largest disk-tier file\); nothing was written$" \
      bench --workload W5 --model "$model" --tier-dir "$tiers"
    check "the plan was printed first" grep -qE '^bench: +32.0 GiB  W5 disk tier \(deleted after W5\): ' "$work/err"
    check "nothing was written" test ! -e "$tiers"
  else
    echo "note: no file system with less than 32 GiB free here; the space refusal is not exercised"
  fi
  # W7 end to end on the tiny model with tiny sizes: its GGUF files are written (said first),
  # then reused; llama.cpp is measured on the same files when node and the oracle are here.
  rm -rf "$work/w7"
  w7=(bench --workload W7 --w7-model "$model" --w7-cache "$work/w7" --w7-prefill 32 --w7-decode 4 --time-limit 30)
  expect_re 0 err '^bench:   +[0-9.]+ GiB  W7 model GGUF q8_0: ' "${w7[@]}" --json "$work/bench.json"
  check "bench wrote the F16 and Q8_0 files" test -f "$work/w7/model-f16.gguf" -a -f "$work/w7/model-q8_0.gguf"
  check "bench wrote the JSON" grep -q '"W7"' "$work/bench.json"
  check "W7 measured kvtier on both files" test "$(grep -cE '"prefill_tok_s": [0-9]' "$work/bench.json")" -ge 2
  if command -v node >/dev/null && [ -d "$src/tests/gguf/oracle/node_modules/node-llama-cpp" ]; then
    check "W7 measured llama.cpp: every ratio a number" \
      test "$(grep -cE '"(prefill|decode_1_seq|decode_8_seqs)": [0-9]' "$work/bench.json")" -eq 6
  else
    echo "note: node or tests/gguf/oracle/node_modules missing (scripts/setup-oracles.sh): W7 without llama.cpp"
    check "W7 says llama.cpp was not measured" grep -q '"llama_cpp_not_measured"' "$work/bench.json"
  fi
  expect 0 err "bench: writes no checkpoint and no disk tier (only --json, if given)" "${w7[@]}" --llama-oracle "$work/no-oracle"
  # SIGINT while W7 generates: its sequences are cancelled, its context freed, the results so
  # far written, exit 130.
  # The error file is emptied first: the background job opens it only when it starts, and
  # until then the wait below would see the previous run's "bench: W7 ..." and signal a
  # process that has not yet installed its handler (SIGINT is ignored in background jobs).
  rm -f "$work/bench.json"
  : >"$work/err"
  "$kvtier" bench --workload W7 --w7-model "$model" --w7-cache "$work/w7" --llama-oracle "$work/no-oracle" --json "$work/bench.json" \
    >"$work/out" 2>"$work/err" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q '^bench: W7 \.\.\.' "$work/err" 2>/dev/null && break
    sleep 0.05
  done
  kill -s INT "$pid"
  wait "$pid"
  status=$?
  checks=$((checks + 1))
  if [ "$status" -eq 130 ] && grep -qxF "kvtier bench: interrupted by SIGINT: the running workload's sequences were cancelled and its context freed" "$work/err"; then
    echo "ok: bench SIGINT -> exit 130"
  else
    fail "bench SIGINT: exit status $status (expected 130) or no interruption message"
  fi
  check "bench SIGINT: the JSON says so" grep -q '"interrupted_by": "SIGINT"' "$work/bench.json"
  ;;

gguf)
  demo_gguf=${KVTIER_DEMO_GGUF:?set to the demo.gguf the build writes}
  # mkmodel writes one GGUF file; it is not overwritten without --force.
  tiny=$work/tiny.gguf
  rm -f "$tiny" "$work"/*.gguf
  expect_re 0 out "^wrote $tiny: LlamaForCausalLM, " mkmodel --format gguf --out "$tiny" --tokenizer bytes --vocab 512
  before=$(sha256sum <"$tiny")
  expect 1 err "kvtier mkmodel: --out: $tiny exists; pass --force to replace it" mkmodel --format gguf --out "$tiny" --seed 3
  check "a refused mkmodel left the file alone" test "$(sha256sum <"$tiny")" = "$before"
  # A new file's folder is created, as an output directory is.
  rm -rf "$work/new-folder"
  expect_re 0 out "^wrote $work/new-folder/deeper/tiny.gguf: LlamaForCausalLM, " mkmodel --format gguf --out "$work/new-folder/deeper/tiny.gguf" --tokenizer bytes --vocab 512
  expect 1 err "kvtier mkmodel: --out: $work/new-folder is a directory; give the .gguf file to write" mkmodel --format gguf --out "$work/new-folder" --force
  usage_error mkmodel "--shard-bytes: a GGUF file is not sharded" --format gguf --out "$work/unused.gguf" --shard-bytes 1MiB
  usage_error mkmodel "--fp8: GGUF has no FP8 type (use kvtier convert --type q8_0)" --format gguf --out "$work/unused.gguf" --fp8 block
  expect_re 0 out '^seq 1: ' run --model "$tiny" --backend cpu --prompt "Hi" --max-tokens 3 --events
  # convert: every --type; inspect shows the metadata and the tensor types.
  for type in auto f32 f16 bf16 q8_0 q4_k; do
    expect_re 0 out "^wrote $work/demo-$type.gguf: LlamaForCausalLM, 56 tensors, " convert --model demo --to gguf --type $type --out "$work/demo-$type.gguf"
  done
  expect 1 err "kvtier convert: --out: $work/demo-f32.gguf exists; pass --force to replace it" convert --model demo --to gguf --out "$work/demo-f32.gguf"
  usage_error convert "--to: 'safetensors' is not one of gguf" --model demo --to safetensors --out "$work/unused.gguf"
  usage_error convert "--type: 'q5_k' is not one of auto|f32|f16|bf16|q8_0|q4_k" --model demo --to gguf --type q5_k --out "$work/unused.gguf"
  expect 1 err "kvtier convert: model $work/nowhere does not exist (give a checkpoint directory or a .gguf file)" convert --model "$work/nowhere" --to gguf --out "$work/unused.gguf"
  check "no failed convert wrote a file" test ! -e "$work/unused.gguf"
  expect 0 out 'format                     GGUF version 3' inspect --model "$work/demo-q8_0.gguf"
  expect 0 out '  general.architecture                     "llama"' inspect --model "$work/demo-q8_0.gguf"
  expect 0 out '  Q8_0                                     43' inspect --model "$work/demo-q8_0.gguf"
  expect_re 0 out '"type": "Q8_0"' inspect --model "$work/demo-q8_0.gguf" --json
  expect 0 out '  Q4_K                                     43' inspect --model "$work/demo-q4_k.gguf"
  # --weight-dtype q4_k quantizes at load as the file was written: the same text, said so.
  expect_re 0 err '^kvtier run: cpu: Q4_K weights, int8 dot products \(' run --model demo --backend cpu --weight-dtype q4_k \
    --prompt "Love is" --max-tokens 8
  cp "$work/out" "$work/q4k-at-load"
  run run --model "$work/demo-q4_k.gguf" --backend cpu --prompt "Love is" --max-tokens 8
  check "run --weight-dtype q4_k writes the text the q4_k file writes" cmp -s "$work/out" "$work/q4k-at-load"
  # GGUF to GGUF keeps the tokenizer and the sampling defaults.
  expect_re 0 out "^wrote $work/again.gguf: " convert --model "$work/demo-q8_0.gguf" --to gguf --type f16 --out "$work/again.gguf"
  expect_re 0 out '^  kvtier.generation_config ' inspect --model "$work/again.gguf"
  # The demo model's GGUF writes what the demo model writes (its sampling defaults included):
  # run's standard output is the generated text alone.
  run run --model demo --backend cpu --prompt "The meaning of life is" --prompt "A computer is" --seed 5
  cp "$work/out" "$work/from-safetensors"
  run run --model "$demo_gguf" --backend cpu --prompt "The meaning of life is" --prompt "A computer is" --seed 5
  check "run --model demo.gguf writes the text --model demo writes" cmp -s "$work/out" "$work/from-safetensors"
  check "... and that text is not empty" grep -qE '^seq 1 ✓ \| \[The meaning of life is\].' "$work/out"
  # On a GPU the CUDA backend loads GGUF through the same loader: the same text from the
  # demo's GGUF as from its directory, and a Q8_0 file dequantized to bf16 and to fp8.
  if "$kvtier" run --model "$tiny" --backend cuda --prompt-ids 1 --max-tokens 1 >/dev/null 2>&1; then
    run run --model demo --backend cuda --prompt "The meaning of life is" --seed 5
    cp "$work/out" "$work/cuda-from-safetensors"
    # The comparison needs a backend that writes the same text twice: said apart if not.
    run run --model demo --backend cuda --prompt "The meaning of life is" --seed 5
    check "cuda: two runs of --model demo write the same text" cmp -s "$work/out" "$work/cuda-from-safetensors"
    run run --model "$demo_gguf" --backend cuda --prompt "The meaning of life is" --seed 5
    check "cuda: run --model demo.gguf writes the text --model demo writes" cmp -s "$work/out" "$work/cuda-from-safetensors"
    expect_re 0 out '^seq 1: ' run --model "$work/demo-q8_0.gguf" --backend cuda --prompt "Love is" --max-tokens 8 --events
    expect_re 0 out '^seq 1: ' run --model "$work/demo-q8_0.gguf" --backend cuda --weight-dtype fp8 --prompt "Love is" --max-tokens 8 --events
  else
    echo "skip: GGUF on the CUDA backend: no usable CUDA device (or a build without CUDA)"
  fi
  echo "The meaning of life is <|endoftext|>" >"$work/line"
  a=$("$kvtier" tokenize --tokenizer "$src/models/demo" <"$work/line")
  b=$("$kvtier" tokenize --tokenizer "$demo_gguf" <"$work/line")
  check "tokenize --tokenizer demo.gguf gives the tokenizer.json's ids" test -n "$a" -a "$a" = "$b"
  a=$(echo "$b" | "$kvtier" detokenize --tokenizer "$src/models/demo")
  b=$(echo "$b" | "$kvtier" detokenize --tokenizer "$demo_gguf")
  check "detokenize --tokenizer demo.gguf gives the tokenizer.json's text" test -n "$a" -a "$a" = "$b"
  # The other commands that take --model take a GGUF file too: perplexity scores as from the
  # directory, bench runs W7 on it.
  head -c 2000 "$src/models/demo/heldout.txt" >"$work/heldout"
  run perplexity --model demo --backend cpu --text "$work/heldout"
  cp "$work/out" "$work/perplexity-dir"
  expect_re 0 out '^mean NLL [0-9.]+ nats/token, perplexity [0-9.]+$' perplexity --model "$demo_gguf" --backend cpu --text "$work/heldout"
  check "perplexity --model demo.gguf scores as --model demo" cmp "$work/out" "$work/perplexity-dir"
  expect_re 0 out "^wrote $work/small.gguf: " mkmodel --preset small-llama --format gguf --out "$work/small.gguf"
  expect_re 0 out '^W7 +small-q8_0 prefill 16 ' bench --workload W7 --w7-model "$work/small.gguf" --w7-cache "$work/w7gguf" \
    --w7-prefill 16 --w7-decode 2 --llama-oracle "$work/no-oracle" --time-limit 30 --json "$work/bench.json"
  check "bench ran W7 on the GGUF file's Q8_0 copy" grep -q "\"gguf\": \"$work/w7gguf/small-q8_0.gguf\"" "$work/bench.json"
  check "W7 without the oracle says llama.cpp was not measured" grep -q '"llama_cpp_not_measured"' "$work/bench.json"
  # Bad files: named, never a crash.
  echo "not a model" >"$work/text.gguf"
  head -c 1000 "$work/demo-f32.gguf" >"$work/cut.gguf"
  expect_re 1 err "^kvtier inspect: truncated or corrupt GGUF file $work/cut.gguf: " inspect --model "$work/cut.gguf"
  expect 1 err "kvtier bench: --small-model: $work/text.gguf is not a GGUF file: it begins with 'not ', not the magic 'GGUF'" bench --workload C0 --backend cpu --tier-dir "$work/unused" --small-model "$work/text.gguf"
  expect 1 err "kvtier bench: --w7-model: $work/text.gguf is not a GGUF file: it begins with 'not ', not the magic 'GGUF'" bench --workload W7 --w7-model "$work/text.gguf" --w7-cache "$work/w7gguf"
  expect 1 err "kvtier run: KVT_ERR_CORRUPT: $work/text.gguf is not a GGUF file: it begins with 'not ', not the magic 'GGUF'" run --model "$work/text.gguf" --prompt-ids 1
  ;;

*)
  echo "unknown group $group" >&2
  exit 2
  ;;
esac
finish
