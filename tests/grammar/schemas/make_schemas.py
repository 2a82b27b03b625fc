#!/usr/bin/env python3
"""Writes the JSON-schema corpus of the structured-output tests: tool definitions' parameter
schemas as function-calling APIs declare them (objects of typed, described properties with
enums, ranges, formats, nested objects, arrays of objects, optional and nullable fields,
tagged unions, $defs/$ref, recursion). Deterministic: the same files on every run.

usage: tests/grammar/schemas/make_schemas.py [--check]
  --check  exit 1 if the committed files differ from what this script writes
Each schema is checked against its metaschema with jsonschema (python3-jsonschema) when
that is installed.
"""
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
COUNT = 240

DOMAINS = {
    "weather": ["location", "city", "country_code", "units", "days", "include_hourly", "lang"],
    "calendar": ["title", "start", "end", "attendees", "location", "reminder_minutes", "visibility"],
    "email": ["to", "cc", "subject", "body", "priority", "send_at", "attachments"],
    "search": ["query", "max_results", "site", "safe_search", "freshness", "region"],
    "database": ["table", "columns", "where", "limit", "order_by", "descending"],
    "files": ["path", "mode", "encoding", "recursive", "pattern_name", "overwrite"],
    "shopping": ["product_id", "quantity", "size", "color", "gift_wrap", "coupon"],
    "travel": ["origin", "destination", "depart_date", "return_date", "passengers", "cabin", "nonstop"],
    "payments": ["amount", "currency", "recipient", "memo", "scheduled", "method"],
    "home": ["device_id", "action", "brightness", "temperature", "room", "duration_minutes"],
    "code": ["language", "source", "timeout_seconds", "stdin", "args", "network"],
    "maps": ["latitude", "longitude", "radius_meters", "category", "open_now", "sort"],
    "translate": ["text", "source_lang", "target_lang", "formality", "glossary_id"],
    "tickets": ["summary", "severity", "component", "assignee", "labels", "due"],
    "music": ["track", "artist", "volume", "shuffle", "repeat", "playlist_id"],
    "recipes": ["dish", "servings", "diet", "max_minutes", "exclude", "cuisine"],
    "crm": ["customer_id", "name", "email", "phone", "stage", "value", "notes"],
    "fitness": ["activity", "minutes", "calories", "heart_rate", "date", "intensity"],
}

ENUMS = [
    ["celsius", "fahrenheit"], ["low", "normal", "high", "urgent"], ["asc", "desc"],
    ["economy", "premium", "business", "first"], ["on", "off", "toggle"], ["draft", "sent", "archived"],
    ["python", "javascript", "bash", "sql"], ["public", "private", "team"], ["S", "M", "L", "XL"],
    ["red", "green", "blue", "black", "white"], ["day", "week", "month", "year"], ["vegan", "vegetarian", "keto", "none"],
    ["lead", "qualified", "won", "lost"], ["card", "bank", "wallet"], ["en", "de", "fr", "es", "ja"],
]
FORMATS = ["date", "date-time", "time", "email", "uuid", "ipv4"]


def describe(rng, name):
    return rng.choice([f"The {name.replace('_', ' ')}.", f"{name.replace('_', ' ').capitalize()} to use",
                       f"Value of {name}", f"Optional {name.replace('_', ' ')} (see docs)"])


def leaf(rng, name, depth):
    """A property schema of one scalar kind, with the constraints tool schemas carry."""
    kind = rng.choices(["string", "enum", "integer", "number", "boolean", "format", "nullable", "const",
                        "bounded_string", "type_list"],
                       weights=[22, 14, 12, 9, 8, 7, 7, 2, 6, 3])[0]
    d = {"description": describe(rng, name)} if rng.random() < 0.8 else {}
    if kind == "string":
        return {"type": "string", **d}
    if kind == "bounded_string":
        lo = rng.choice([0, 1, 2, 3])
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.choice([4, 8, 16, 24]), **d}
    if kind == "enum":
        values = rng.choice(ENUMS)
        s = {"enum": values, **d}
        if rng.random() < 0.5:
            s["type"] = "string"
        return s
    if kind == "integer":
        s = {"type": "integer", **d}
        r = rng.random()
        if r < 0.35:
            lo = rng.choice([0, 1, -10, -100, 5])
            s["minimum"] = lo
            s["maximum"] = lo + rng.choice([1, 9, 10, 99, 100, 365, 1000, 65535])
        elif r < 0.5:
            s["minimum"] = rng.choice([0, 1])
        elif r < 0.6:
            s["exclusiveMinimum"] = 0
            s["exclusiveMaximum"] = rng.choice([10, 100, 1000])
        if rng.random() < 0.2:
            s["default"] = s.get("minimum", 1)
        return s
    if kind == "number":
        s = {"type": "number", **d}
        r = rng.random()
        if r < 0.3:
            s["minimum"] = rng.choice([0, -90, -180, 0.5])
            s["maximum"] = rng.choice([1, 90, 180, 100, 2.5])
            if s["maximum"] <= s["minimum"]:
                s["maximum"] = s["minimum"] + 10
        elif r < 0.45:
            s["exclusiveMinimum"] = 0
        elif r < 0.55:
            s["minimum"] = -1
            s["exclusiveMaximum"] = 1
        return s
    if kind == "boolean":
        return {"type": "boolean", **d}
    if kind == "format":
        return {"type": "string", "format": rng.choice(FORMATS), **d}
    if kind == "nullable":
        inner = leaf(rng, name, depth)
        inner.pop("description", None)
        return {"anyOf": [inner, {"type": "null"}], **d}
    if kind == "const":
        return {"const": rng.choice(["v1", "fixed", 1, True]), **d}
    return {"type": rng.choice([["string", "null"], ["integer", "string"], ["number", "boolean"]]), **d}


def array_of(rng, name, depth, defs):
    items = value(rng, name + "_item", depth + 1, defs) if rng.random() < 0.5 else leaf(rng, name, depth)
    s = {"type": "array", "items": items, "description": describe(rng, name)}
    if rng.random() < 0.4:
        s["minItems"] = rng.choice([0, 1, 2])
    if rng.random() < 0.7:
        s["maxItems"] = s.get("minItems", 0) + rng.choice([1, 2, 3, 5])
    return s


def obj(rng, names, depth, defs, strict=None):
    props = {}
    for n in names:
        props[n] = value(rng, n, depth + 1, defs)
    required = [n for n in names if rng.random() < 0.5]
    s = {"type": "object", "properties": props}
    if required:
        s["required"] = required
    strict = rng.random() < 0.75 if strict is None else strict
    if strict:
        s["additionalProperties"] = False
    elif rng.random() < 0.3:
        s["additionalProperties"] = rng.choice([True, {"type": "string", "maxLength": 8}, {"type": "integer"}])
    return s


def value(rng, name, depth, defs):
    r = rng.random()
    if depth >= 3 or r < 0.62:
        return leaf(rng, name, depth)
    if r < 0.74:
        return array_of(rng, name, depth, defs)
    if r < 0.84:
        sub = [f"{name}_{k}" for k in rng.sample(["id", "kind", "label", "value", "note", "count", "when"], rng.randint(1, 3))]
        return obj(rng, sub, depth, defs)
    if r < 0.92:
        # A named definition, referenced.
        key = f"{name.capitalize()}Spec"
        if key not in defs:
            defs[key] = None  # reserve (recursion through another property is possible)
            defs[key] = obj(rng, [f"{name}_a", f"{name}_b"], depth, defs)
        return {"$ref": f"#/$defs/{key}"}
    # A tagged union: objects told apart by a required const "kind".
    branches = []
    for tag in rng.sample(["text", "image", "link", "file", "code"], rng.randint(2, 3)):
        branches.append({"type": "object",
                         "properties": {"kind": {"const": tag}, f"{tag}_value": leaf(rng, tag, depth + 1)},
                         "required": ["kind", f"{tag}_value"], "additionalProperties": False})
    return {"oneOf": branches, "description": describe(rng, name)}


def special(rng, i):
    """Shapes that occur less often but must work: recursion, free-form arguments, allOf."""
    kind = i % 6
    if kind == 0:
        return {"$defs": {"node": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 12},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
            "required": ["name"], "additionalProperties": False}},
            "type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}, "required": ["tree"]}
    if kind == 1:
        return {"type": "object", "properties": {"tool": {"enum": ["search", "fetch", "run"]},
                                                 "arguments": {"type": "object", "description": "free-form"}},
                "required": ["tool", "arguments"], "additionalProperties": False}
    if kind == 2:
        return {"type": "object", "properties": {"config": {"allOf": [{"$ref": "#/$defs/Config"}],
                                                            "description": "wrapped ref"}},
                "$defs": {"Config": {"type": "object", "properties": {"retries": {"type": "integer", "minimum": 0, "maximum": 5},
                                                                      "verbose": {"type": "boolean"}}}}}
    if kind == 3:
        return {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10}, "arguments": {"type": "object"}},
            "required": ["name", "arguments"]}, "minItems": 1, "maxItems": 3}
    if kind == 4:
        return {"anyOf": [{"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20}},
                           "required": ["answer"], "additionalProperties": False},
                          {"type": "object", "properties": {"error": {"type": "string", "maxLength": 20},
                                                            "code": {"type": "integer", "minimum": 100, "maximum": 599}},
                           "required": ["error"], "additionalProperties": False}]}
    return {"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 3, "items": {
        "type": "array", "maxItems": 3, "items": {"type": "number", "minimum": -1, "maximum": 1}}}},
        "required": ["matrix"]}


def make(i):
    rng = random.Random(1000 + i)
    if i % 10 == 9:
        schema = special(rng, i // 10)
    else:
        domain = rng.choice(sorted(DOMAINS))
        names = rng.sample(DOMAINS[domain], rng.randint(2, min(6, len(DOMAINS[domain]))))
        defs = {}
        schema = obj(rng, names, 0, defs, strict=rng.random() < 0.85)
        if defs:
            schema["$defs"] = defs
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                  "title": f"{domain}_{i}", "description": f"Parameters of the {domain} tool #{i}.", **schema}
    return schema


def main():
    check = "--check" in sys.argv[1:]
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    differ = []
    for i in range(COUNT):
        schema = make(i)
        if jsonschema is not None:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        text = json.dumps(schema, indent=1) + "\n"
        path = os.path.join(HERE, f"tool_{i:03d}.json")
        if check:
            if not os.path.exists(path) or open(path).read() != text:
                differ.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    if differ:
        print("schemas differ from make_schemas.py:", *differ[:5], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
