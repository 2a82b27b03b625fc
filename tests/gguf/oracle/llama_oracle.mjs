// llama.cpp as the reference of kvtier's GGUF tests: node-llama-cpp's prebuilt CPU binaries
// (installed by scripts/setup-oracles.sh; nothing is built or downloaded here) load a GGUF
// file and answer one question, as JSON lines in OUT.
//
// usage: node llama_oracle.mjs MODE GGUF IN OUT
//   tokenize  IN: one JSON string per line. OUT: first {"add_bos", "add_eos", "bos", "eos"},
//             then per line {"special": ids with special tokens parsed, "text": ids with
//             them left as text} (no BOS/EOS added: llama.cpp's tokenize with add_special
//             false, parse_special true / false).
//   generate  IN: {"prompts": [[ids]...], "max_tokens": N}. OUT: per prompt {"tokens":
//             greedy continuation (EOS included, not stopped at)}; OUT.probs: the next-token
//             distribution before each generated token.
//   score     IN: {"sequences": [[ids]...]}. OUT: per sequence {"positions": n}; OUT.probs:
//             the next-token distribution after each token.
// OUT.probs holds the distributions one after another, each `vocab` float32 (little-endian)
// in token id order, llama.cpp's softmax of its logits; OUT's first line is {"vocab": n}.
import { readFileSync, writeFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [mode, modelPath, inPath, outPath] = process.argv.slice(2);
if (!["tokenize", "generate", "score"].includes(mode) || !modelPath || !inPath || !outPath) {
  console.error("usage: node llama_oracle.mjs tokenize|generate|score GGUF IN OUT");
  process.exit(2);
}

const llama = await getLlama({
  gpu: false,
  build: "never",
  usePrebuiltBinaries: true,
  skipDownload: true,
  progressLogs: false,
  logLevel: LlamaLogLevel.error,
  maxThreads: 1,
});
const model = await llama.loadModel({ modelPath, vocabOnly: mode === "tokenize", gpuLayers: 0, useMmap: true });

const lines = [];
const rows = [];  // Float32Arrays for OUT.probs
function dense(probabilities, size) {
  const out = new Float32Array(size);
  for (const [token, p] of probabilities) out[token] = p;
  rows.push(out);
}

if (mode === "tokenize") {
  const texts = readFileSync(inPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
  lines.push({
    add_bos: model.tokens.shouldPrependBosToken,
    add_eos: model.tokens.shouldAppendEosToken,
    bos: model.tokens.bos,
    eos: model.tokens.eos,
  });
  for (const text of texts) {
    lines.push({ special: model.tokenize(text, true), text: model.tokenize(text, false) });
  }
} else {
  const request = JSON.parse(readFileSync(inPath, "utf8"));
  const sequences = mode === "generate" ? request.prompts : request.sequences;
  const longest = Math.max(...sequences.map((s) => s.length)) + (request.max_tokens ?? 0) + 8;
  const context = await model.createContext({
    contextSize: Math.max(256, longest),
    batchSize: 512,
    sequences: 1,
    threads: 1,
    flashAttention: false,
    // kvtier's CPU backend keeps K and V in fp32; llama.cpp's default is fp16.
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
  });
  const sequence = context.getSequence();
  const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  lines.push({ vocab });
  for (const ids of sequences) {
    await sequence.clearHistory();
    if (mode === "generate") {
      const tokens = [];
      const steps = sequence.evaluateWithMetadata(ids, { probabilities: true }, { temperature: 0, yieldEogToken: true });
      for await (const step of steps) {
        tokens.push(step.token);
        dense(step.probabilities, vocab);
        if (tokens.length >= request.max_tokens) break;
      }
      lines.push({ tokens });
    } else {
      const input = ids.map((token) => [token, { generateNext: { probabilities: true } }]);
      const results = await sequence.controlledEvaluate(input);
      for (const r of results) dense(r.next.probabilities, vocab);
      lines.push({ positions: results.length });
    }
  }
  await context.dispose();
}
writeFileSync(outPath, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
if (mode !== "tokenize") {
  const all = new Float32Array(rows.reduce((n, r) => n + r.length, 0));
  let at = 0;
  for (const r of rows) {
    all.set(r, at);
    at += r.length;
  }
  writeFileSync(outPath + ".probs", Buffer.from(all.buffer));
}
await model.dispose();
await llama.dispose();
