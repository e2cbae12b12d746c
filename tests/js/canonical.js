'use strict';
// JavaScript oracle for LakeSync's canonical JSON and deltaIds (docs/protocol.md §3).
//
// Reads one JSON document per stdin line and writes one JSON line per input:
//   {"value": V}                                       -> {"canonical": stableStringify(V), "sha256": hex}
//   {"delta": {clientId, hlc, table, rowId, columns}}  -> {"canonical": ..., "sha256": deltaId}
// Output is itself JSON-encoded so raw newlines, control characters and lone surrogates survive.
// Input numbers go through JSON.parse, so they become JavaScript doubles exactly as a browser
// client would hold them (integers above 2^53 lose precision, as they do in the real client).

const crypto = require('crypto');
const readline = require('readline');

let stringify;
try {
  stringify = require('fast-json-stable-stringify');
} catch (err) {
  process.stderr.write(
    'fast-json-stable-stringify is not installed; run: npm ci --prefix tests/js\n'
  );
  process.exit(3);
}

function canonicalOf(doc) {
  if (Object.prototype.hasOwnProperty.call(doc, 'delta')) {
    const d = doc.delta;
    // The same object shape the TypeScript client hashes (keys are sorted by the stringifier).
    return stringify({
      clientId: d.clientId,
      columns: d.columns.map((c) => ({ column: c.column, value: c.value })),
      hlc: String(d.hlc),
      rowId: d.rowId,
      table: d.table,
    });
  }
  return stringify(doc.value);
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
rl.on('line', (line) => {
  if (!line.trim()) return;
  const canonical = canonicalOf(JSON.parse(line));
  const sha256 = crypto.createHash('sha256').update(canonical, 'utf8').digest('hex');
  out.push(JSON.stringify({ canonical, sha256 }));
});
rl.on('close', () => {
  process.stdout.write(out.length ? out.join('\n') + '\n' : '');
});
