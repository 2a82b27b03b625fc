// llama.cpp's prefill and decode speed on one GGUF file, through node-llama-cpp's prebuilt
// CPU binaries (scripts/setup-oracles.sh): the llama.cpp side of W7, measured as
// tools/cpu_speed measures kvtier. Prints one JSON line.
//
// usage: node llama_speed.mjs GGUF [PREFILL [PREFILL_THREADS [DECODE [DECODE_THREADS [ROUNDS [SEQUENCES]]]]]]
//   defaults 512 2 128 1 3 1. Prefill: one sequence of PREFILL tokens evaluated in one batch;
//   decode: SEQUENCES sequences at once, each DECODE greedy tokens after a 16-token prompt of
//   its own, one token per sequence per step (node-llama-cpp batches the sequences' pending
//   tokens into one decode), counting every sequence's tokens. Medians of ROUNDS after one
//   warm-up round. DECODE_THREADS and SEQUENCES may be comma-separated lists: every
//   combination is measured with the model loaded once, listed in "decode"; decode_tok_s is
//   the first one's.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, ...rest] = process.argv.slice(2);
if (!modelPath) {
  console.error("usage: node llama_speed.mjs GGUF [PREFILL [PREFILL_THREADS [DECODE [DECODE_THREADS [ROUNDS [SEQUENCES]]]]]]");
  process.exit(2);
}
const [prefill, prefillThreads, decode, rounds] = [[0, 512], [1, 2], [2, 128], [4, 3]].map(([i, d]) =>
  rest[i] === undefined ? d : Number(rest[i]));
const list = (text, d) => (text === undefined ? [d] : text.split(",").map(Number));
const decodeThreads = list(rest[3], 1), sequenceCounts = list(rest[5], 1);

const llama = await getLlama({
  gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
  logLevel: LlamaLogLevel.error, maxThreads: Math.max(prefillThreads, ...decodeThreads),
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
const tokens = (n) => Array.from({ length: n }, (_, i) => (i * 7919 + 13) % vocab);
const median = (v) => v.slice().sort((a, b) => a - b)[Math.floor(v.length / 2)];

// fn gets `count` sequences of one context.
async function withSequences(threads, count, fn) {
  const context = await model.createContext({
    contextSize: Math.max(256, prefill + 16, decode + 32), batchSize: Math.max(prefill, 16), sequences: count, threads,
    flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  try {
    return await fn(Array.from({ length: count }, () => context.getSequence()));
  } finally {
    await context.dispose();
  }
}

const prefillTps = [];
if (prefill > 0) {
  await withSequences(prefillThreads, 1, async ([sequence]) => {
    const prompt = tokens(prefill);
    for (let r = 0; r <= rounds; ++r) {
      await sequence.clearHistory();
      const t0 = performance.now();
      await sequence.evaluateWithoutGeneratingNewTokens(prompt);
      if (r > 0) prefillTps.push(prefill / ((performance.now() - t0) / 1000));  // round 0 warms up
    }
  });
}
// tok/s of `sequences` sequences decoding at once with `threads` threads.
async function decodeSpeed(threads, sequences) {
  const tps = [];
  await withSequences(threads, sequences, async (all) => {
    for (let r = 0; r <= rounds; ++r) {
      await Promise.all(all.map(async (sequence) => {
        await sequence.clearHistory();
        await sequence.evaluateWithoutGeneratingNewTokens(tokens(16));
      }));
      const t0 = performance.now();
      await Promise.all(all.map(async (sequence) => {
        let next = 1;
        for (let i = 0; i < decode; ++i) {
          for await (const token of sequence.evaluate([next], { temperature: 0 })) {
            next = token;
            break;
          }
        }
      }));
      if (r > 0) tps.push(sequences * decode / ((performance.now() - t0) / 1000));  // round 0 warms up
    }
  });
  return Number(median(tps).toFixed(1));
}
const decodes = [];
if (decode > 0) {
  for (const sequences of sequenceCounts) {
    for (const threads of decodeThreads) decodes.push({ threads, sequences, decode_tok_s: await decodeSpeed(threads, sequences) });
  }
}
console.log(JSON.stringify({
  model: modelPath, engine: "llama.cpp", prefill_tokens: prefill, prefill_threads: prefillThreads,
  prefill_tok_s: prefill > 0 ? Number(median(prefillTps).toFixed(1)) : 0, decode_tokens: decode,
  decode_threads: decodeThreads[0], sequences: sequenceCounts[0], decode_tok_s: decode > 0 ? decodes[0].decode_tok_s : 0,
  decode: decodes,
}));
await model.dispose();
