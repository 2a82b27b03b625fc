# Sourced by final.sh (call B2): W8 with fp8 KV streamed from the host (bf16 weights), and W8
# fp8 weights + fp8 KV again (run-to-run spread), in one run-bench pass with its ceilings.
while [ ! -e $M.ready ]; do sleep 1; done; log "model ready"
mkdir -p $R/bench
timeout 30 python3 $COMMON/anchors/ceilings.py > $R/bench/ceilings.txt 2>&1; log "ceilings rc=$?"
timeout 150 $C/bin/kvtier bench --workload W8 --model $M --kv-dtype fp8 --ceilings $R/bench/ceilings.txt \
  --json $R/bench/w8-kv8-streamed.json --commit "$COMMIT" --time-limit 140 --tier-time-limit 140 > $R/bench/w8-kv8-streamed.txt 2>&1
log "W8 kv fp8 streamed rc=$?"; grep -E "^W8" $R/bench/w8-kv8-streamed.txt
timeout $(( $(left) - 10 )) $C/bin/kvtier bench --workload W8 --model $M --weight-dtype fp8 --kv-dtype fp8 --ceilings $R/bench/ceilings.txt \
  --json $R/bench/w8-fp8-fp8-again.json --commit "$COMMIT" --time-limit 100 --tier-time-limit 100 > $R/bench/w8-fp8-fp8-again.txt 2>&1
log "W8 fp8+fp8 rc=$?"; grep -E "^W8" $R/bench/w8-fp8-fp8-again.txt
