#!/usr/bin/env python3
"""Writes corpus.jsonl, the tokenizer exactness corpus: one JSON string per line.

Deterministic (fixed seed), so re-running it reproduces the committed file byte for byte.
Lines mix English, Chinese, Japanese, Korean, emoji (incl. ZWJ and flag sequences), code,
runs of spaces/tabs/newlines, digits, mixed scripts, contractions, Unicode spaces,
combining marks and the special-token strings of Llama-2/Mistral, Llama-3 and Qwen.
"""
import json
import os
import random

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll find it; they've said it's fine, and we'd agree.",
    "DON'T SHOUT! I'LL HEAR YOU. SHE'S HERE, THEY'RE THERE, WE'VE GONE, I'M OK, HE'D GO.",
    "Hello, world! How are you doing today?",
    "In 1969, Apollo 11 landed on the Moon at 20:17 UTC.",
    "Prices rose 3.14159% to $1,234,567.89 (approx.) in Q3 2023.",
    "e-mail: someone@example.com, URL: https://example.org/path?q=1&r=two#frag",
    "Rock 'n' roll isn't dead; it's just resting.",
    "She said \"yes\" -- then 'no' ... then maybe?!",
    "A sentence with trailing spaces   ",
    "   leading spaces and a tab\tin the middle",
    "Well . . . that ' s odd , isn ' t it ?",
    "Mr. O'Neil's cat's toy's color is 'red'.",
    "naïve café résumé coöperate façade jalapeño",
    "The year 2024 has 366 days; 1000000 seconds is about 11.57 days.",
    "UPPER lower MiXeD CaSe wOrDs",
    "x = y + z * (a - b) / c",
    "Tokenization is the process of splitting text into tokens.",
]
CHINESE = [
    "你好，世界！今天天气很好。",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "我们在2023年10月1日去了北京天安门广场。",
    "这是一个测试句子，包含标点符号：逗号、句号。问号？感叹号！",
    "繁體中文與简体中文混合使用的情況。",
    "《红楼梦》是中国古典四大名著之一。",
]
JAPANESE = [
    "こんにちは、世界！今日はいい天気ですね。",
    "東京タワーは日本の首都東京にあります。",
    "カタカナとひらがなと漢字を混ぜた文章です。",
    "ｶﾀｶﾅ（半角）とカタカナ（全角）、ＡＢＣ１２３。",
    "吾輩は猫である。名前はまだ無い。",
]
KOREAN = [
    "안녕하세요, 세계! 오늘 날씨가 좋네요.",
    "한국어 문장을 토큰화하는 테스트입니다.",
    "서울특별시는 대한민국의 수도입니다.",
]
OTHER = [
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε! Η γρήγορη καφέ αλεπού.",
    "مرحبا بالعالم! كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया! आप कैसे हैं?",
    "สวัสดีชาวโลก",
    "Xin chào thế giới! Tiếng Việt có dấu.",
    "Zażółć gęślą jaźń. Ärger über Öl. Straße.",
    "ქართული ენა",
    "Ελληνικά ١٢٣٤٥ ٦٧٨٩٠ ௧௨௩ ๑๒๓",
]
EMOJI = [
    "😀😃😄😁😆😅😂🤣",
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🧑🏿‍🚀 astronaut",
    "🇯🇵🇺🇸🇩🇪🇫🇷 flags",
    "❤️ ❤ ♥️ ✨⭐️🌟",
    "I ❤️ NY 🗽 and 🍕!!",
    "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "🫠🫡🫥 new emoji 🪿🪼",
    "keycaps 1️⃣ 2️⃣ #️⃣ *️⃣",
]
CODE = [
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "const x = {a: 1, 'b': [2, 3], \"c\": null}; // comment",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "<div class=\"row\"><span>text</span></div>",
    "if x != None and y == 0:\n        raise ValueError(f\"bad {x!r}\")",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "    \n    indented\n        more\n\n\n",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, true, false]}",
    "a==b!==c<=d>=e=>f->g::h...i///j***k",
]
WHITESPACE = [
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\n \n", "\t \t",
    "    ", "        ", " \t\n", "\u00a0", "\u3000", "\u2003", "\u2028", "\u0085", "\u200b",
    "\ufeff", "\u202f", "\v", "\f",
]
DIGITS = [
    "0", "7", "42", "123", "1234", "12345", "123456789", "3.14", "1,000", "-17", "+1e-9",
    "2024-01-01", "12:34:56", "0x1F", "1/2", "٣", "١٢٣٤", "一二三", "①②③", "Ⅻ", "½", "²³",
    "１２３４５", "10000000000000000000",
]
SPECIAL = [
    "<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_0|>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|vision_start|>", "<|im_start", "im_end|>", "<s", "s>",
    "[INST]", "[/INST]", "<<SYS>>", "<0x41>", "▁", "▁▁hello",
]
COMBINING = [
    "e\u0301", "a\u0308o\u0308u\u0308", "\u1100\u1161\u11a8", "n\u0303", "A\u030a",
    "\u0915\u094d\u0937", "Z\u0351\u036b\u0343\u036a", "\u212b", "\uff21", "\u2126",
]
CONTRACTIONS = [
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
    "'x", "''", "'", "’s", "n't", "'ſ",
]
FRAGMENT_POOLS = [ENGLISH, CHINESE, JAPANESE, KOREAN, OTHER, EMOJI, CODE, WHITESPACE, DIGITS,
                  SPECIAL, COMBINING, CONTRACTIONS]


def words(pool, rng):
    text = rng.choice(pool)
    parts = text.split(" ")
    start = rng.randrange(len(parts))
    return " ".join(parts[start:start + rng.randint(1, 6)])


def mixed_line(rng):
    pieces = []
    for _ in range(rng.randint(1, 8)):
        pool = rng.choice(FRAGMENT_POOLS)
        piece = words(pool, rng) if pool in (ENGLISH, OTHER, CODE) else rng.choice(pool)
        pieces.append(piece)
        pieces.append(rng.choice(["", "", " ", " ", "\n", "\t", "  "]))
    return "".join(pieces)


def main():
    rng = random.Random(20240613)
    lines = []
    # Every fragment on its own, and with a leading space.
    for pool in FRAGMENT_POOLS:
        for text in pool:
            lines.append(text)
            lines.append(" " + text)
    # Whitespace runs around words.
    for ws in WHITESPACE:
        for w in ["word", "二", "9", "!", "<s>", "<|im_end|>"]:
            lines.append(ws + w + ws + ws + w + ws)
    # Digit runs of every length from 1 to 24, alone and glued to letters.
    for n in range(1, 25):
        digits = "".join(str((i * 7 + n) % 10) for i in range(n))
        lines.append(digits)
        lines.append("abc" + digits + "def " + digits + ".")
    # Special tokens glued to text and spaces on each side.
    for s in SPECIAL:
        lines.append("hello" + s + "world")
        lines.append("hello " + s + " world")
        lines.append(s + s + "\n" + s)
    # Random mixtures: the bulk.
    while len(lines) < 2200:
        lines.append(mixed_line(rng))
    # Long lines: paragraphs and long runs.
    for i in range(20):
        lines.append(" ".join(mixed_line(rng) for _ in range(12)))
    lines.append(" " * 300)
    lines.append("\n" * 50)
    lines.append("a" * 500)
    lines.append("😀" * 100)
    lines.append("你" * 300)
    lines.append("1" * 200)
    lines.append("".join(ENGLISH) * 3)
    lines.append("".join(CHINESE + JAPANESE + KOREAN) * 2)
    lines.append("")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.jsonl")
    with open(out, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"{len(lines)} lines -> {out}")


if __name__ == "__main__":
    main()
