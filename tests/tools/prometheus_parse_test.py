#!/usr/bin/env python3
"""`kvtier run --metrics FILE` writes text that a real Prometheus parser reads back: Debian's
python3-prometheus-client (prometheus_client.parser), the parser Prometheus' own Python
client uses. Checks each family's type, the histograms' shape (cumulative buckets, +Inf
equal to the count) and that the numbers are the run's.

Usage: prometheus_parse_test.py KVTIER_CLI MODEL_DIR WORK_DIR
"""
import json
import pathlib
import subprocess
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit("python3-prometheus-client is missing: install it (scripts/install-deps.sh)")


def main() -> int:
    cli, model, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    metrics_path = work / "metrics.prom"
    run = subprocess.run(
        [cli, "run", "--model", model, "--backend", "cpu", "--threads", "2", "--max-tokens", "5", "--ignore-eos",
         "--prompt-ids", "1,2,3", "--prompt-ids", "4,5,6,7", "--prompt-ids", "8,9", "--json",
         "--metrics", str(metrics_path)],
        check=True, capture_output=True, text=True)
    stats = json.loads(run.stdout)["stats"]
    text = metrics_path.read_text(encoding="utf-8")

    families = {f.name: f for f in text_string_to_metric_families(text)}
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    def value(family, labels=None):
        for sample in families[family].samples:
            if labels is None or all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
        raise KeyError(f"{family} {labels}")

    types = {
        "kvtier_steps": "counter", "kvtier_generated_tokens": "counter", "kvtier_prompt_tokens_computed": "counter",
        "kvtier_sequences_finished": "counter", "kvtier_sequences": "gauge", "kvtier_tier_used_bytes": "gauge",
        "kvtier_tier_capacity_bytes": "gauge", "kvtier_context_info": "gauge",
        "kvtier_time_to_first_token_seconds": "histogram", "kvtier_inter_token_latency_seconds": "histogram",
        "kvtier_step_duration_seconds": "histogram", "kvtier_pending_write_blocks": "gauge",
    }
    for name, kind in types.items():
        expect(name in families and families[name].type == kind, f"{name}: type {kind}")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1

    expect(value("kvtier_generated_tokens") == 15 == stats["generated_tokens"], "generated tokens 15")
    expect(value("kvtier_steps") == stats["steps"], "steps as in the JSON statistics")
    expect(value("kvtier_sequences_finished", {"reason": "completed"}) == 3, "3 completed")
    expect(value("kvtier_tier_capacity_bytes", {"tier": "gpu"}) == stats["tiers"]["gpu"]["capacity_bytes"],
           "gpu capacity as in the JSON statistics")
    expect(value("kvtier_context_info", {"backend": "cpu"}) == 1, "context info")
    expect(value("kvtier_pending_write_blocks", {"tier": "disk"}) == stats["pending_writes"]["disk_blocks"],
           "pending disk writes as in the JSON statistics")
    counts = {"kvtier_time_to_first_token_seconds": 3, "kvtier_inter_token_latency_seconds": 12,
              "kvtier_step_duration_seconds": stats["steps"]}
    for name, count in counts.items():
        samples = families[name].samples
        buckets = [(s.labels["le"], s.value) for s in samples if s.name == name + "_bucket"]
        expect(buckets and buckets[-1][0] == "+Inf", f"{name}: +Inf bucket last")
        bounds = [float(le) for le, _ in buckets]
        expect(bounds == sorted(bounds) and len(set(bounds)) == len(bounds), f"{name}: bounds ascending")
        values = [v for _, v in buckets]
        expect(values == sorted(values), f"{name}: buckets cumulative")
        total = [s.value for s in samples if s.name == name + "_count"]
        expect(total == [count] and values[-1] == count, f"{name}: count {count}, got {total}")
        total_sum = [s.value for s in samples if s.name == name + "_sum"]
        expect(len(total_sum) == 1 and total_sum[0] > 0, f"{name}: a positive sum")
    print(f"{len(families)} metric families parsed; {len(text.splitlines())} lines")
    print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
