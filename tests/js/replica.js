'use strict';
// A replica following the TypeScript client's documented rules (docs/protocol.md §3-§6), for
// tests: it knows only the original five column types, holds values as JSON.parse gives them,
// merges column-level last-writer-wins by (hlc, clientId), pages pulls by hasMore, and computes
// deltaIds with fast-json-stable-stringify as the real client does.
//
// Usage: node replica.js URL GATEWAY TOKEN CLIENT_ID < writes.json
// stdin: {"writes": [{"op", "table", "rowId", "columns": [{column, value}]}]}: pushed first
// (HLC from Date.now() << 16), then everything is pulled. stdout: {"rows": {"table/rowId":
// {column: value}}} with the values exactly as this replica holds them.

const crypto = require('crypto');
const stringify = require('fast-json-stable-stringify');

const [url, gw, token, clientId] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };

function deltaId(d) {
  const canonical = stringify({
    clientId: d.clientId,
    columns: d.columns.map((c) => ({ column: c.column, value: c.value })),
    hlc: d.hlc,
    rowId: d.rowId,
    table: d.table,
  });
  return crypto.createHash('sha256').update(canonical, 'utf8').digest('hex');
}

function wins(a, b) {
  // Is clock a = [hlc, clientId] later than b? HLCs are decimal strings beyond 2^53: BigInt.
  if (b === undefined) return true;
  const [ha, hb] = [BigInt(a[0]), BigInt(b[0])];
  return ha > hb || (ha === hb && a[1] > b[1]);
}

async function main() {
  const input = JSON.parse(require('fs').readFileSync(0, 'utf8') || '{"writes": []}');
  if (input.writes.length) {
    const hlc = String(BigInt(Date.now()) << 16n);
    const deltas = input.writes.map((w) => {
      const d = { op: w.op, table: w.table, rowId: w.rowId, clientId, columns: w.columns, hlc };
      return { ...d, deltaId: deltaId(d) };
    });
    const r = await fetch(`${url}/v1/sync/${gw}/push`, {
      method: 'POST', headers, body: JSON.stringify({ clientId, deltas }),
    });
    if (r.status !== 200) throw new Error(`push: ${r.status} ${await r.text()}`);
  }
  const cells = new Map(); // "table/rowId" -> {column: {value, clock}}, plus tombstones
  const tombs = new Map();
  let since = '0';
  for (;;) {
    const r = await fetch(`${url}/v1/sync/${gw}/pull?since=${since}&clientId=${clientId}&limit=100`,
      { headers });
    if (r.status !== 200) throw new Error(`pull: ${r.status} ${await r.text()}`);
    const page = JSON.parse(await r.text()); // numbers become doubles, as in a browser
    for (const d of page.deltas) {
      const key = `${d.table}/${d.rowId}`;
      const clock = [d.hlc, d.clientId];
      if (d.op === 'DELETE') {
        if (wins(clock, tombs.get(key))) tombs.set(key, clock);
        continue;
      }
      const row = cells.get(key) || {};
      for (const c of d.columns) {
        if (!row[c.column] || wins(clock, row[c.column].clock)) row[c.column] = { value: c.value, clock };
      }
      cells.set(key, row);
    }
    since = page.serverHlc;
    if (!page.hasMore) break;
  }
  const rows = {};
  for (const [key, row] of cells) {
    const tomb = tombs.get(key);
    const live = Object.entries(row).filter(([, cell]) => !tomb || wins(cell.clock, tomb));
    if (live.length) rows[key] = Object.fromEntries(live.map(([name, cell]) => [name, cell.value]));
  }
  process.stdout.write(JSON.stringify({ rows }));
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
