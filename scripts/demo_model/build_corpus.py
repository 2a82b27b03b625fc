#!/usr/bin/env python3
"""Turns the unpacked Debian packages of build_corpus.sh into documents: one fortune cookie or
one dictionary entry each, deduplicated, split into train and valid by a hash of the text
(so the split does not depend on the order of files). Standard library only."""
import argparse
import base64
import gzip
import hashlib
import json
import os
import re

# Fortune files left out: ASCII art is pictures, not prose.
SKIP_FORTUNE_FILES = {"ascii-art"}
LICENCES = {
    "fortunes": "BSD-4-Clause (University of California) for the collection; cookies are quotations",
    "fortunes-min": "BSD-4-Clause (University of California) for the collection; cookies are quotations",
    "fortune-anarchism": "public-domain (BLAG Fortune Assortment Project); packaging GPL-3+",
    "fortunes-bofh-excuses": "public-domain",
    "dict-devil": "public-domain (The Devil's Dictionary, Ambrose Bierce, copyright expired)",
    "dict-jargon": "public-domain (The Jargon File 4.4.7); packaging GPL-2+",
}
VALID_PERCENT = 3


def fortunes(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    for cookie in re.split(r"^%\s*$", text, flags=re.M):
        yield cookie


def b64_number(s):
    # dictd's index numbers: base64 digits, most significant first.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for c in s:
        n = n * 64 + alphabet.index(c)
    return n


def dict_entries(index_path, dict_path):
    data = gzip.open(dict_path).read()
    for line in open(index_path, encoding="utf-8"):
        word, offset, length = line.rstrip("\n").split("\t")[:3]
        if word.startswith("00database") or word.startswith("00-database"):
            continue
        yield data[b64_number(offset):b64_number(offset) + b64_number(length)].decode("utf-8", "replace")


def tidy(doc):
    # Lines lose their indentation and trailing spaces; runs of blank lines become one.
    lines = [l.strip() for l in doc.replace("\t", " ").splitlines()]
    text = "\n".join(lines).strip()
    return re.sub(r"\n{3,}", "\n\n", text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--versions", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    versions = dict(line.split() for line in open(args.versions))
    seen, train, valid, counts = set(), [], [], {}
    for package in sorted(versions):
        base = os.path.join(args.root, package)
        docs = []
        fdir = os.path.join(base, "usr/share/games/fortunes")
        if os.path.isdir(fdir):
            for name in sorted(os.listdir(fdir)):
                path = os.path.join(fdir, name)
                if "." in name or name in SKIP_FORTUNE_FILES or os.path.islink(path):
                    continue
                docs.extend(fortunes(path))
        ddir = os.path.join(base, "usr/share/dictd")
        if os.path.isdir(ddir):
            for name in sorted(os.listdir(ddir)):
                if name.endswith(".index"):
                    stem = os.path.join(ddir, name[:-len(".index")])
                    docs.extend(dict_entries(stem + ".index", stem + ".dict.dz"))
        kept = 0
        for doc in docs:
            doc = tidy(doc)
            if len(doc) < 20 or doc in seen:
                continue
            seen.add(doc)
            kept += 1
            bucket = int(hashlib.sha256(doc.encode()).hexdigest()[:8], 16) % 100
            (valid if bucket < VALID_PERCENT else train).append(doc)
        counts[package] = kept
    with open(os.path.join(args.out, "train.jsonl"), "w") as f:
        for doc in train:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with open(os.path.join(args.out, "valid.jsonl"), "w") as f:
        for doc in valid:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with open(os.path.join(args.out, "SOURCES.tsv"), "w") as f:
        f.write("package\tversion\tdocuments\tlicence\n")
        for package in sorted(versions):
            f.write(f"{package}\t{versions[package]}\t{counts[package]}\t{LICENCES.get(package, 'see /usr/share/doc/' + package + '/copyright')}\n")
    print(f"{len(train)} train documents ({sum(map(len, train))} chars), {len(valid)} valid ({sum(map(len, valid))} chars)")


if __name__ == "__main__":
    main()
