# Sourced by final.sh (call B3): W3 and W4 in bf16 and with fp8 weights + fp8 KV, against the
# run's own ceilings (the seed baseline OOMs on both under the cap: docs/WORKLOADS.md).
while [ ! -e $M.ready ]; do sleep 1; done; log "model ready"
rm -rf $R/bench $R/tests $R/*.txt; mkdir -p $R/bench3; O=$R/bench3
timeout 40 python3 $COMMON/anchors/ceilings.py > $O/ceilings.txt 2>&1; log "ceilings rc=$?"
timeout $(( ($(left) - 10) / 2 )) $C/bin/kvtier bench --workload W3,W4 --model $M --ceilings $O/ceilings.txt \
  --json $O/bench.json --commit "$COMMIT" --time-limit 60 > $O/bench.txt 2>&1
log "bf16 W3 W4 rc=$?"; grep -E "^(W3|W4) " $O/bench.txt
timeout $(( $(left) - 10 )) $C/bin/kvtier bench --workload W3,W4 --model $M --weight-dtype fp8 --kv-dtype fp8 --ceilings $O/ceilings.txt \
  --json $O/bench-fp8-kv8.json --commit "$COMMIT" --time-limit 60 > $O/bench-fp8-kv8.txt 2>&1
log "fp8+fp8 W3 W4 rc=$?"; grep -E "^(W3|W4) " $O/bench-fp8-kv8.txt
