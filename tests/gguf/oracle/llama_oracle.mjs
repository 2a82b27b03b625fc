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
//             greedy continuation (EOS included, not stopped at), "probs": [the next-token
//             distribution before each generated token, over the whole vocabulary]}.
//   score     IN: {"sequences": [[ids]...]}. OUT: per sequence {"probs": [the next-token
//             distribution after each token]}.
// Distributions are llama.cpp's softmax of its logits (float32), token id order.
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
  maxThreads: 2,
});
const model = await llama.loadModel({ modelPath, vocabOnly: mode === "tokenize", gpuLayers: 0, useMmap: true });

function dense(probabilities, size) {
  const out = new Array(size).fill(0);
  for (const [token, p] of probabilities) out[token] = Number(p.toPrecision(9));
  return out;
}

const lines = [];
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
    threads: 2,
    flashAttention: false,
  });
  const sequence = context.getSequence();
  const vocab = model.fileInsights.metadata?.tokenizer?.ggml?.tokens?.length ?? 0;
  for (const ids of sequences) {
    await sequence.clearHistory();
    if (mode === "generate") {
      const tokens = [];
      const probs = [];
      const steps = sequence.evaluateWithMetadata(ids, { probabilities: true }, { temperature: 0, yieldEogToken: true });
      for await (const step of steps) {
        tokens.push(step.token);
        probs.push(dense(step.probabilities, Math.max(vocab, step.probabilities.size)));
        if (tokens.length >= request.max_tokens) break;
      }
      lines.push({ tokens, probs });
    } else {
      const input = ids.map((token) => [token, { generateNext: { probabilities: true } }]);
      const results = await sequence.controlledEvaluate(input);
      const probs = results.map((r) => dense(r.next.probabilities, Math.max(vocab, r.next.probabilities.size)));
      lines.push({ probs });
    }
  }
  await context.dispose();
}
writeFileSync(outPath, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
await model.dispose();
await llama.dispose();
