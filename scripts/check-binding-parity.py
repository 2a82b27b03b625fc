#!/usr/bin/env python3
"""Checks that every function of the public C API has a counterpart in each binding.

Lists the KVT_API functions of include/kvtier/kvtier.h and looks for a call of each in the
hand-written layer of every binding: Go (bindings/go/*.go, cgo preambles included, tests
excluded), Java (bindings/java/src/**/*.java and the JNI glue in bindings/java/kvtier_java.i)
and C# (bindings/csharp/src/*.cs and bindings/csharp/kvtier_csharp.i). A call is the name
followed by "(", case-insensitively (the SWIG layers spell it Kvt_x in Go, kvt_x in Java
and C#), or in Go the low layer's function passed as a value (`capi.Kvt_x`, which a table of
setters or a shared reader then calls); names in // comments do not count. Functions a binding deliberately does not call
are listed, with the reason, in bindings/parity-exemptions.txt. Fails (exit 1) naming each
function without a binding, each exemption without a reason, and each exemption that is no
longer needed (the function is gone, or the binding now calls it).

Usage: check-binding-parity.py [--root DIR] [--header FILE] [--exemptions FILE]
"""
import argparse
import pathlib
import re
import sys

LANGUAGES = {
    "go": ["bindings/go/*.go"],
    "java": ["bindings/java/src/**/*.java", "bindings/java/kvtier_java.i"],
    "csharp": ["bindings/csharp/src/*.cs", "bindings/csharp/kvtier_csharp.i"],
}


def c_api_functions(header: pathlib.Path) -> list:
    """The KVT_API functions the header declares, following its #include "..." lines."""
    text = header.read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # doc comments name functions too
    functions = set(re.findall(r"\bKVT_API\b[^;{(]*?\b(kvt_\w+)\s*\(", text))
    for included in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, flags=re.M):
        functions.update(c_api_functions(header.parent / included))
    return sorted(functions)


def binding_sources(root: pathlib.Path, patterns: list) -> str:
    parts = []
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            if path.name.endswith("_test.go"):
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            parts.extend(re.sub(r"//.*", "", line) for line in lines)
    return "\n".join(parts)


def read_exemptions(path: pathlib.Path, errors: list) -> dict:
    """{(function, language): reason}; a line is `function languages reason`, languages
    being comma-separated or `all`."""
    exemptions = {}
    if not path.exists():
        return exemptions
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        if len(fields) < 3 or not fields[2].strip():
            errors.append(f"{path}:{number}: an exemption needs a function, languages and a reason")
            continue
        function, languages, reason = fields
        names = list(LANGUAGES) if languages == "all" else languages.split(",")
        for language in names:
            if language not in LANGUAGES:
                errors.append(f"{path}:{number}: unknown language '{language}'")
                continue
            exemptions[(function, language)] = reason
    return exemptions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent, type=pathlib.Path)
    parser.add_argument("--header", type=pathlib.Path)
    parser.add_argument("--exemptions", type=pathlib.Path)
    args = parser.parse_args()
    root = args.root
    header = args.header or root / "include/kvtier/kvtier.h"
    exemptions_path = args.exemptions or root / "bindings/parity-exemptions.txt"

    errors = []
    functions = c_api_functions(header)
    if not functions:
        errors.append(f"{header}: no KVT_API functions found")
    exemptions = read_exemptions(exemptions_path, errors)
    sources = {language: binding_sources(root, patterns) for language, patterns in LANGUAGES.items()}

    width = max((len(f) for f in functions), default=10)
    print(f"{'function':<{width}}  " + "  ".join(f"{language:<6}" for language in LANGUAGES))
    for function in functions:
        cells = []
        for language, text in sources.items():
            called = re.search(rf"(?i)\b{re.escape(function)}\s*\(", text) is not None
            if language == "go" and not called:
                called = re.search(rf"\bcapi\.{re.escape(function.capitalize())}\b", text) is not None
            exempt = (function, language) in exemptions
            if called and exempt:
                errors.append(f"{function}: exempted for {language} in {exemptions_path.name}, but the binding calls it: "
                              "remove the exemption")
            elif not called and not exempt:
                errors.append(f"{function}: no {language} binding calls it (add one, with a test, or an exemption "
                              f"with its reason to {exemptions_path.name})")
            cells.append("yes" if called else ("exempt" if exempt else "MISSING"))
        print(f"{function:<{width}}  " + "  ".join(f"{cell:<6}" for cell in cells))
    for function, language in sorted(exemptions):
        if function not in functions:
            errors.append(f"{exemptions_path.name}: '{function}' ({language}) is not a C API function any more")

    print(f"\n{len(functions)} functions, {len(LANGUAGES)} bindings, {len(exemptions)} exemptions")
    for error in errors:
        print("error: " + error, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
