#!/usr/bin/env python3
"""Checks the size limits of src/ (STYLE.md: small files, one concept each): no file over
600 lines, no class or struct with more than 30 data members or more than 40 public methods.

Data members are the non-static ones (static constants and nested types do not count);
public methods are the public member functions by declaration, overloads each counted,
constructors, destructors and operators of assignment left out. The C++ is read as text
(comments and literals removed, then each class body split into its top-level
declarations), which holds for this code base's style; a class the reader cannot follow is
reported rather than passed silently.

usage: scripts/check-sizes.py [--verbose] [DIR...]   (default: src)
Prints each violation and exits 1 if there is one; --verbose lists every class's counts.
"""
import os
import re
import sys

MAX_LINES = 600
MAX_DATA_MEMBERS = 30
MAX_PUBLIC_METHODS = 40
SOURCE_ENDINGS = ('.h', '.cc', '.cu', '.cuh', '.c', '.hpp', '.cpp')


def strip_code(text):
    """The text without comments, string/char literals' contents and preprocessor lines,
    newlines kept so that offsets still map to lines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(')' + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r'[^\n]', '', text[i:j]))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
        elif c == '#' and (i == 0 or text[i - 1] == '\n' or text[:i].rsplit('\n', 1)[-1].strip() == ''):
            # a preprocessor line, with its continuations
            j = i
            while True:
                k = text.find('\n', j)
                if k < 0:
                    j = n
                    break
                if text[k - 1] != '\\':
                    j = k
                    break
                j = k + 1
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def matching(text, i, open_char='{', close_char='}'):
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_char:
            depth += 1
        elif text[j] == close_char:
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


CLASS_HEAD = re.compile(
    r'(?<![\w:])(class|struct)\s+(?:alignas\s*\([^)]*\)\s*)?(?:\[\[[^\]]*\]\]\s*)?([A-Za-z_]\w*)'
    r'\s*(?:final\s*)?(?::(?:[^{;()]|\([^)]*\))*)?\{')


ANNOTATION = re.compile(r'\b(?:[A-Z][A-Z0-9]*_[A-Z0-9_]*|__attribute__|alignas)\s*\(')


def drop_annotations(body):
    """The body without attribute macros (ABSL_GUARDED_BY(mu_), __attribute__((...)),
    alignas(64)), which would read as function calls."""
    out = []
    pos = 0
    for m in ANNOTATION.finditer(body):
        if m.start() < pos:
            continue
        out.append(body[pos:m.start()])
        pos = matching(body, m.end() - 1, '(', ')') + 1
    out.append(body[pos:])
    return ''.join(out)


def top_level_declarations(body):
    """(text, kind) for each top-level declaration of a class body: kind is 'access',
    'function' (a declaration or definition), 'type' (nested class/enum/union) or 'other'."""
    body = drop_annotations(body)
    decls = []
    cur = ''
    i = 0
    paren = 0
    while i < len(body):
        c = body[i]
        if c == '(':
            paren += 1
        elif c == ')':
            paren -= 1
        if paren == 0 and c == '{':
            head = cur.strip()
            end = matching(body, i)
            if re.match(r'^(template\s*<.*>\s*)?(struct|class|enum|union)\b', head, re.S):
                # a nested type, perhaps with declarators after it: struct X {...} x_;
                k = body.find(';', end)
                k = len(body) if k < 0 else k
                tail = body[end + 1:k].strip()
                decls.append((head, 'type'))
                if tail:
                    decls.append((tail, 'other'))
                cur = ''
                i = k + 1
                continue
            if re.search(r'\)\s*(const|noexcept|override|final|&|&&|\s|->\s*[\w:<>,\s*&]+)*$', head) or \
                    re.search(r'\)\s*:', head):
                decls.append((head, 'function'))  # an inline definition
                cur = ''
                i = end + 1
                continue
            cur += body[i:end + 1]  # a brace initializer
            i = end + 1
            continue
        if paren == 0 and c == ';':
            if cur.strip():
                decls.append((cur.strip(), 'decl'))
            cur = ''
        elif paren == 0 and c == ':' and re.fullmatch(r'\s*(public|private|protected)\s*', cur):
            decls.append((cur.strip(), 'access'))
            cur = ''
        else:
            cur += c
        i += 1
    return decls


def drop_template_arguments(decl):
    """The declaration without template argument lists (std::function<void(int)> f_ has no
    call in it), operators' names kept."""
    out = []
    i = 0
    while i < len(decl):
        c = decl[i]
        before = ''.join(out).rstrip()
        if c == '<' and before and (before[-1].isalnum() or before[-1] == '_') and \
                not re.search(r'operator\s*<?$', before):
            depth = 0
            while i < len(decl):
                if decl[i] in '<(':
                    depth += 1
                elif decl[i] in '>)':
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            i += 1
            continue
        out.append(c)
        i += 1
    return ''.join(out)


def declarator_count(decl):
    depth = 0
    count = 1
    for c in decl:
        if c in '<([{':
            depth += 1
        elif c in '>)]}':
            depth -= 1
        elif c == ',' and depth == 0:
            count += 1
    return count


def count_class(name, keyword, body):
    access = 'public' if keyword == 'struct' else 'private'
    fields = 0
    methods = []
    for decl, kind in top_level_declarations(body):
        if kind == 'access':
            access = decl
            continue
        if kind == 'type':
            continue
        d = re.sub(r'^template\s*<.*?>\s*(?=\w)', '', decl, flags=re.S).strip()
        d = re.sub(r'^\[\[[^\]]*\]\]\s*', '', d)
        d = drop_template_arguments(d)
        if re.match(r'^(using|typedef|friend|static_assert|enum|struct|class|union)\b', d):
            continue
        head = d.split('=')[0] if kind != 'function' else d
        call = re.search(r'(operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*)\s*\(', head)
        is_function = kind == 'function' or (call is not None and not re.search(r'\w\s*\{', head))
        if is_function and call is not None:
            fname = call.group(1)
            if fname in (name, 'explicit') or fname.startswith('~') or re.match(r'operator\s*=$', fname):
                continue
            if access == 'public':
                methods.append(fname)
            continue
        if re.match(r'^(static|inline\s+static|static\s+inline|constexpr\s+static|static\s+constexpr)\b', d):
            continue
        fields += declarator_count(d)
    return fields, methods


def classes(text):
    pos = 0
    while True:
        m = CLASS_HEAD.search(text, pos)
        if not m:
            return
        start = m.end() - 1
        end = matching(text, start)
        line = text.count('\n', 0, m.start()) + 1
        yield m.group(1), m.group(2), line, text[start + 1:end]
        pos = start + 1  # nested classes are found too


def source_files(dirs):
    for d in dirs:
        for base, subdirs, files in os.walk(d):
            subdirs.sort()
            for f in sorted(files):
                if f.endswith(SOURCE_ENDINGS):
                    yield os.path.join(base, f)


def main(argv):
    verbose = '--verbose' in argv
    dirs = [a for a in argv if a != '--verbose'] or ['src']
    problems = []
    checked_files = checked_classes = 0
    for path in source_files(dirs):
        with open(path, encoding='utf-8', errors='replace') as f:
            text = f.read()
        checked_files += 1
        lines = text.count('\n') + (0 if text.endswith('\n') or not text else 1)
        if lines > MAX_LINES:
            problems.append(f'{path}: {lines} lines (at most {MAX_LINES})')
        for keyword, name, line, body in classes(strip_code(text)):
            checked_classes += 1
            fields, methods = count_class(name, keyword, body)
            if verbose:
                print(f'{fields:4d} data members {len(methods):4d} public methods  {path}:{line} {keyword} {name}')
            if fields > MAX_DATA_MEMBERS:
                problems.append(f'{path}:{line}: {keyword} {name} has {fields} data members (at most {MAX_DATA_MEMBERS})')
            if len(methods) > MAX_PUBLIC_METHODS:
                problems.append(f'{path}:{line}: {keyword} {name} has {len(methods)} public methods '
                                f'(at most {MAX_PUBLIC_METHODS})')
    for p in problems:
        print(p)
    print(f'check-sizes: {checked_files} files, {checked_classes} classes: '
          f'{"ok" if not problems else str(len(problems)) + " over the limits"}')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
