// The official OpenAI client for JavaScript (npm `openai`, pinned in package.json) against
// kvtier's OpenAI-compatible service (examples/go/openai-server) serving the demo model on
// loopback, on the CPU. The service is checked against kvtier itself: a streamed chat
// completion has the text `kvtier run` prints for the same seed, and log-probabilities are
// those the C API reports (`kvtier run --json`), token bytes read from tokenizer.json here.
// Then n completions, structured output validated by ajv, 32 streaming clients at once, a
// client that aborts mid-stream, and malformed requests.
// Run by ctest (openai_client_test) with KVTIER_OPENAI_SERVER, KVTIER_CLI and
// KVTIER_DEMO_MODEL; exits 77 (skipped) when this directory's node_modules is missing
// (scripts/setup-oracles.sh installs it).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
if (!fs.existsSync(path.join(here, 'node_modules', 'openai', 'package.json'))) {
  console.log(`SKIPPED: ${path.join(here, 'node_modules')} is missing (run scripts/setup-oracles.sh)`);
  process.exit(77);
}
const { default: OpenAI } = await import('openai');
const { default: Ajv } = await import('ajv');

const serverBin = process.env.KVTIER_OPENAI_SERVER;
const cli = process.env.KVTIER_CLI;
const demo = process.env.KVTIER_DEMO_MODEL;
assert.ok(serverBin && cli && demo, 'set KVTIER_OPENAI_SERVER, KVTIER_CLI and KVTIER_DEMO_MODEL');

let server;
let baseURL;
let client;

// Starts the service on a free port (it prints the address it bound).
before(async () => {
  server = spawn(serverBin, ['--model', demo, '--listen', '127.0.0.1:0', '--backend', 'cpu', '--threads', '2'],
                 { stdio: ['ignore', 'pipe', 'inherit'] });
  baseURL = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`the server exited (${code}) before listening: ${out}`)));
  });
  client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  if (!server || server.exitCode !== null) return;
  const exited = new Promise((resolve) => server.on('exit', resolve));
  server.kill('SIGTERM');
  assert.equal(await exited, 0, 'the server stops cleanly on SIGTERM');
});

function kvtierRun(args) {
  return execFileSync(cli, ['run', '--model', demo, '--backend', 'cpu', '--threads', '2', ...args],
                      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
}

async function metrics() {
  const text = await (await fetch(`${baseURL}/metrics`)).text();
  const value = (name) => {
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    assert.ok(line, `metric ${name} in /metrics`);
    return Number(line.split(' ')[1]);
  };
  return {
    unfinished: value('kvtier_sequences_unfinished'),
    cancelled: value('kvtier_sequences_finished_total{reason="cancelled"}'),
    completed: value('kvtier_sequences_finished_total{reason="completed"}'),
    generated: value('kvtier_generated_tokens_total'),
  };
}

// Polls /metrics until `done` holds (or fails after 20 s).
async function untilMetrics(done, what) {
  const deadline = Date.now() + 20000;
  for (;;) {
    const m = await metrics();
    if (done(m)) return m;
    assert.ok(Date.now() < deadline, `${what}: ${JSON.stringify(m)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function streamedChat(params) {
  const stream = await client.chat.completions.create({ model: 'demo', stream: true, ...params });
  const texts = [];
  const finish = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      texts[choice.index] = (texts[choice.index] ?? '') + (choice.delta.content ?? '');
      if (choice.finish_reason) finish[choice.index] = choice.finish_reason;
    }
  }
  return { texts, finish };
}

// Each token's bytes as tokenizer.json's byte-level BPE defines them (GPT-2's byte-to-unicode
// table), independently of kvtier.
function tokenBytesTable() {
  const tokenizer = JSON.parse(fs.readFileSync(path.join(demo, 'tokenizer.json'), 'utf8'));
  const printable = [];
  for (let b = 33; b <= 126; ++b) printable.push(b);
  for (let b = 161; b <= 172; ++b) printable.push(b);
  for (let b = 174; b <= 255; ++b) printable.push(b);
  const toByte = new Map();
  printable.forEach((b) => toByte.set(String.fromCodePoint(b), b));
  let extra = 0;
  for (let b = 0; b < 256; ++b) if (!printable.includes(b)) toByte.set(String.fromCodePoint(256 + extra++), b);
  const table = new Map();
  for (const [piece, id] of Object.entries(tokenizer.model.vocab)) {
    table.set(id, Buffer.from([...piece].map((c) => toByte.get(c))));
  }
  for (const added of tokenizer.added_tokens) table.set(added.id, Buffer.from(added.content, 'utf8'));
  return table;
}

test('the service lists its model and is healthy', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['demo']);
  assert.equal((await client.models.retrieve('demo')).id, 'demo');
  const health = await fetch(`${baseURL}/health`);
  assert.equal(health.status, 200);
});

test('a streamed chat completion has the text kvtier run prints for the same seed', async () => {
  const prompt = 'Tell me something about computers.';
  const expected = kvtierRun(['--chat', '--prompt', prompt, '--seed', '11', '--temperature', '0.9',
                              '--max-tokens', '40']);
  assert.ok(expected.endsWith('\n'));
  const { texts, finish } = await streamedChat({ messages: [{ role: 'user', content: prompt }], seed: 11,
                                                 temperature: 0.9, max_tokens: 40 });
  assert.ok(texts[0].length > 0);
  assert.equal(texts[0], expected.slice(0, -1));
  assert.ok(['stop', 'length'].includes(finish[0]));
  // A text completion of a plain prompt likewise.
  const plain = kvtierRun(['--prompt', 'The meaning of life is', '--seed', '4', '--max-tokens', '24']);
  const completion = await client.completions.create({ model: 'demo', prompt: 'The meaning of life is', seed: 4,
                                                      max_tokens: 24 });
  assert.equal(completion.choices[0].text, plain.slice(0, -1));
});

test('n: 3 gives three choices, each the request alone with seed + its index', async () => {
  const messages = [{ role: 'user', content: 'Say something wise.' }];
  const params = { model: 'demo', messages, temperature: 1, max_tokens: 20 };
  const three = await client.chat.completions.create({ ...params, n: 3, seed: 5 });
  assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
  const alone = await Promise.all([5, 6, 7].map((seed) => client.chat.completions.create({ ...params, seed })));
  assert.deepEqual(three.choices.map((c) => c.message.content), alone.map((r) => r.choices[0].message.content));
  assert.equal(new Set(three.choices.map((c) => c.message.content)).size, 3, 'three different completions');
  for (const c of three.choices) assert.equal(c.message.role, 'assistant');
  assert.equal(three.usage.prompt_tokens, alone[0].usage.prompt_tokens);
  assert.equal(three.usage.completion_tokens, alone.reduce((sum, r) => sum + r.usage.completion_tokens, 0));
  assert.equal(three.usage.total_tokens, three.usage.prompt_tokens + three.usage.completion_tokens);
  const streamed = await streamedChat({ messages, temperature: 1, max_tokens: 20, n: 3, seed: 5 });
  assert.deepEqual(streamed.texts, three.choices.map((c) => c.message.content));
});

test('logprobs with top_logprobs: 5 are the C API\'s', async () => {
  const prompt = 'What is a programmer?';
  const reference = JSON.parse(kvtierRun(['--chat', '--prompt', prompt, '--temperature', '0', '--max-tokens', '16',
                                          '--logprobs', '5', '--json'])).sequences[0];
  const response = await client.chat.completions.create({
    model: 'demo', messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: 16, logprobs: true,
    top_logprobs: 5 });
  const content = response.choices[0].logprobs.content;
  const bytes = tokenBytesTable();
  // kvtier lists the end-of-sequence token too; OpenAI lists the content's tokens.
  const listed = reference.finish_reason === 'stop' ? reference.logprobs.slice(0, -1) : reference.logprobs;
  assert.equal(content.length, listed.length);
  assert.ok(content.length > 0);
  content.forEach((entry, i) => {
    const want = listed[i];
    assert.equal(Math.fround(entry.logprob), Math.fround(want.logprob), `token ${i}`);
    assert.deepEqual(entry.bytes, [...bytes.get(want.token)], `token ${i}'s bytes`);
    assert.equal(entry.top_logprobs.length, 5);
    entry.top_logprobs.forEach((alt, j) => {
      assert.equal(Math.fround(alt.logprob), Math.fround(want.top[j].logprob), `token ${i} alternative ${j}`);
      assert.deepEqual(alt.bytes, [...bytes.get(want.top[j].token)], `token ${i} alternative ${j}'s bytes`);
    });
  });
  // The same numbers streamed, and for a text completion (logprobs: 5).
  const stream = await client.chat.completions.create({
    model: 'demo', messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: 16, logprobs: true,
    top_logprobs: 5, stream: true });
  const streamedLogprobs = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) streamedLogprobs.push(...(c.logprobs?.content ?? []));
  }
  assert.deepEqual(streamedLogprobs, content);
  const text = await client.completions.create({ model: 'demo', prompt: 'A computer is', temperature: 0,
                                                max_tokens: 8, logprobs: 5 });
  const plain = JSON.parse(kvtierRun(['--prompt', 'A computer is', '--temperature', '0', '--max-tokens', '8',
                                      '--logprobs', '5', '--json'])).sequences[0];
  text.choices[0].logprobs.token_logprobs.forEach((lp, i) => assert.equal(Math.fround(lp),
                                                                            Math.fround(plain.logprobs[i].logprob)));
});

test('a json_schema response validates against its schema', async () => {
  const schema = {
    type: 'object',
    properties: {
      author: { type: 'string', minLength: 1, maxLength: 24 },
      year: { type: 'integer', minimum: 1800, maximum: 2100 },
      mood: { type: 'string', enum: ['happy', 'sad', 'wise'] },
    },
    required: ['author', 'year', 'mood'],
    additionalProperties: false,
  };
  const validate = new Ajv().compile(schema);
  for (const seed of [1, 2, 3]) {
    const response = await client.chat.completions.create({
      model: 'demo', messages: [{ role: 'user', content: 'Who said it, when, and how?' }], seed, temperature: 1,
      max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'quote', strict: true, schema } } });
    const choice = response.choices[0];
    assert.equal(choice.finish_reason, 'stop', choice.message.content);
    const value = JSON.parse(choice.message.content);
    assert.ok(validate(value), `${choice.message.content}: ${JSON.stringify(validate.errors)}`);
  }
});

test('32 concurrent streaming clients all finish, and no sequence is left open', async () => {
  const before = await metrics();
  const results = await Promise.all(Array.from({ length: 32 }, (_, i) => streamedChat({
    messages: [{ role: 'user', content: `Question number ${i}: what is love?` }], seed: i, max_tokens: 24 })));
  for (const { texts, finish } of results) {
    assert.equal(texts.length, 1);
    assert.ok(['stop', 'length'].includes(finish[0]));
  }
  const after = await untilMetrics((m) => m.completed >= before.completed + 32 && m.unfinished === 0,
                                   'every sequence finished');
  assert.equal(after.unfinished, 0);
  assert.equal(after.cancelled, before.cancelled);
});

test('a client aborting mid-stream frees its sequence at once', async () => {
  const before = await metrics();
  const stream = await client.chat.completions.create({
    model: 'demo', messages: [{ role: 'user', content: 'Tell me a very long story.' }], stream: true,
    max_tokens: 400, logit_bias: { 0: -100 } }); // no end-of-text: it would run 400 tokens
  let pieces = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) ++pieces;
    if (pieces === 3) {
      stream.controller.abort();
      break;
    }
  }
  const after = await untilMetrics((m) => m.cancelled === before.cancelled + 1 && m.unfinished === 0,
                                   'the aborted sequence is cancelled');
  assert.ok(after.generated - before.generated < 400, `it stopped early: ${after.generated - before.generated} tokens`);
});

test('malformed requests get 400 with an OpenAI-shaped error', async () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  const cases = [
    [{ model: 'demo' }, 'messages'],
    [{ model: 'demo', messages: [] }, 'messages'],
    [{ model: 'demo', messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
    [{ messages }, 'model'],
    [{ model: 'demo', messages, temperature: 5 }, 'temperature'],
    [{ model: 'demo', messages, temperature: 'hot' }, 'temperature'],
    [{ model: 'demo', messages, n: 0 }, 'n'],
    [{ model: 'demo', messages, max_tokens: 0 }, 'max_tokens'],
    [{ model: 'demo', messages, top_logprobs: 3 }, 'top_logprobs'],
    [{ model: 'demo', messages, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    [{ model: 'demo', messages, logit_bias: { abc: 1 } }, 'logit_bias'],
    [{ model: 'demo', messages, logit_bias: { 5: 500 } }, 'logit_bias'],
    [{ model: 'demo', messages, stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    [{ model: 'demo', messages, presence_penalty: 3 }, 'presence_penalty'],
    [{ model: 'demo', messages, tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'],
    [{ model: 'demo', messages, bogus: 1 }, 'bogus'],
    [{ model: 'demo', messages, response_format: { type: 'xml' } }, 'response_format'],
    [{ model: 'demo', messages, response_format: { type: 'json_schema',
       json_schema: { name: 's', schema: { type: 'string', pattern: 'a+' } } } }, 'response_format'],
  ];
  for (const [body, param] of cases) {
    await assert.rejects(client.chat.completions.create(body), (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `${JSON.stringify(body)}: ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.error.type, 'invalid_request_error');
      assert.equal(err.param, param, `${JSON.stringify(body)}: ${err.message}`);
      assert.ok(err.error.message.length > 0);
      return true;
    });
  }
  await assert.rejects(client.completions.create({ model: 'demo', prompt: [] }),
                       (err) => err instanceof OpenAI.BadRequestError && err.param === 'prompt');
  await assert.rejects(client.chat.completions.create({ model: 'gpt-4o', messages }),
                       (err) => err instanceof OpenAI.NotFoundError && err.code === 'model_not_found');
  for (const body of ['{"model": "demo", "messages": [', '', '[1, 2]']) {
    const response = await fetch(`${baseURL}/v1/chat/completions`,
                                 { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
    assert.equal(response.status, 400);
    const { error } = await response.json();
    assert.deepEqual(Object.keys(error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(error.type, 'invalid_request_error');
  }
  // The service still serves.
  const ok = await client.chat.completions.create({ model: 'demo', messages, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});
