#!/usr/bin/env python3
"""Independent check of grammar-constrained outputs (the corpus test's second half).

Reads JSON lines {"source", "kind": "schema"|"gbnf", "seed", "finish", "text"} and checks
every output that finished complete ("finish": "grammar"):
  - schema: json.loads, then jsonschema (python3-jsonschema) validation with a
    FormatChecker: jsonschema's own for date, email, uuid, ipv4; time and date-time by
    the RFC 3339 checks below;
  - json.gbnf: json.loads gives an object;
  - arithmetic.gbnf: Python's own parser reads it as an arithmetic expression (numbers,
    + - * /, unary minus, parentheses only);
  - list.gbnf: one to eight lines "- text" without line-break characters.
Outputs that hit the token limit ("length") are incomplete by definition and only counted.
Any "error" finish, invalid UTF-8, or failed check is a failure.

usage: validate_outputs.py OUTPUTS.jsonl --schemas DIR [--min-generations N]
                           [--min-finished-share F]
Prints a summary; exit status 1 on any failure or unmet minimum.
"""
import argparse
import ast
import collections
import datetime
import json
import os
import re
import sys

import jsonschema

LIST_LINE = re.compile("- [^\r\n\x0b\x0c\x85\u2028\u2029]{1,40}\n")

# RFC 3339 full-time and date-time, checked here rather than by jsonschema, whose checkers
# for them need a package Debian does not ship (rfc3339-validator): the shape by regular
# expression, the values by Python's datetime.
TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


def is_time(text):
    if not isinstance(text, str):
        return True  # formats constrain strings only
    m = TIME.fullmatch(text)
    if not m:
        return False
    datetime.time(int(m[1]), int(m[2]), int(m[3]))
    if m[5] != "Z":
        hours, minutes = int(m[5][1:3]), int(m[5][4:6])
        if hours > 23 or minutes > 59:
            return False
    return True


def is_date_time(text):
    if not isinstance(text, str):
        return True
    date, sep, time = text.partition("T")
    if not sep:
        return False
    datetime.date.fromisoformat(date)
    return len(date) == 10 and is_time(time)


def format_checker():
    checker = jsonschema.FormatChecker()
    checker.checks("time", raises=ValueError)(is_time)
    checker.checks("date-time", raises=ValueError)(is_date_time)
    return checker


def check_arithmetic(text):
    tree = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise ValueError(f"not arithmetic: {type(node).__name__}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ValueError("a constant that is not a number")


def check_list(text):
    lines = LIST_LINE.findall(text)
    if "".join(lines) != text or not 1 <= len(lines) <= 8:
        raise ValueError("not one to eight '- text' lines")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outputs")
    ap.add_argument("--schemas", required=True)
    ap.add_argument("--min-generations", type=int, default=0)
    ap.add_argument("--min-finished-share", type=float, default=0.0)
    args = ap.parse_args()

    validators = {}
    counts = collections.Counter()
    failures = []
    per_kind = collections.Counter()
    with open(args.outputs, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            counts["generations"] += 1
            counts[f"finish_{rec['finish']}"] += 1
            source, text = rec["source"], rec.get("text")
            where = f"{source} seed {rec['seed']}"
            if rec["finish"] == "error" or rec.get("invalid_utf8"):
                failures.append(f"{where}: {rec.get('error', 'invalid UTF-8')}")
                continue
            if rec["finish"] != "grammar":
                continue
            try:
                if rec["kind"] == "schema":
                    if source not in validators:
                        with open(os.path.join(args.schemas, source), encoding="utf-8") as s:
                            schema = json.load(s)
                        cls = jsonschema.validators.validator_for(schema)
                        validators[source] = cls(schema, format_checker=format_checker())
                    validators[source].validate(json.loads(text))
                elif source == "json.gbnf":
                    if not isinstance(json.loads(text), dict):
                        raise ValueError("not an object")
                elif source == "arithmetic.gbnf":
                    check_arithmetic(text)
                elif source == "list.gbnf":
                    check_list(text)
                else:
                    raise ValueError(f"no checker for {source}")
                counts["valid"] += 1
                per_kind[rec["kind"]] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failures.append(f"{where}: {type(e).__name__}: {str(e)[:300]}\n    text: {text[:300]!r}")

    finished = counts["finish_grammar"]
    share = finished / counts["generations"] if counts["generations"] else 0.0
    print(f"generations {counts['generations']}, finished complete {finished} ({share:.1%}), "
          f"hit the token limit {counts['finish_length']}, valid {counts['valid']} "
          f"(schema {per_kind['schema']}, gbnf {per_kind['gbnf']}), failures {len(failures)}")
    ok = True
    for failure in failures[:20]:
        print("FAIL", failure)
    if failures:
        ok = False
    if counts["generations"] < args.min_generations:
        print(f"FAIL: {counts['generations']} generations, fewer than {args.min_generations}")
        ok = False
    if share < args.min_finished_share:
        print(f"FAIL: finished share {share:.1%} below {args.min_finished_share:.0%}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
