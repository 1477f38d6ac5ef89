'use strict';

// The package as npm would publish it: its files, both module entries, and a report that
// never gets its confirm.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');
const client = require('..');

test('npm pack ships the entries, the types, the README and the LICENSE, nothing else', () => {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--loglevel=error'], { cwd: path.join(__dirname, '..'), encoding: 'utf8' });
  const files = JSON.parse(out)[0].files.map((f) => f.path).sort();
  assert.deepEqual(files, ['LICENSE', 'README.md', 'index.d.ts', 'index.js', 'index.mjs', 'package.json']);
});

test('the ES module entry exports what the CommonJS one does', async () => {
  const esm = await import('retry-scheduler-client');
  for (const [name, v] of Object.entries(client)) assert.equal(esm[name], v, name);
  assert.equal(typeof esm.reportFailure, 'function');
});

test('a report without a confirm rejects after its timeout', async () => {
  const listeners = [];
  const silent = { waitForConfirms() {}, on(ev, f) { listeners.push(ev); }, publish() { return true; } };
  const msg = { content: Buffer.from('p'), properties: { messageId: 'm-1', headers: {} }, fields: {} };
  await assert.rejects(client.reportFailure(silent, msg, 'orders', new Error('x'), { timeoutMs: 50 }), /no confirm for the report within 50 ms/);
  assert.deepEqual(listeners, ['return']);
});
