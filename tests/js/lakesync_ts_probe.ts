// The original TypeScript LakeSync client (../shared/lakesync-ts) as a web app uses it, against
// a LakeSync gateway. tests/lakesync_ts.py copies this file into the client package of the
// installed monorepo (its imports resolve there), then runs it under bun or bundles it for the
// browser (`bun build --target browser`), where it is `globalThis.lakesyncProbe`.
//
// Under bun, `bun run <this> '<json>'` (or the JSON on stdin) runs the scenario the JSON describes
// (`websocketScenario`; `scriptScenario` when it has `steps`; `relationsScenario` with
// `"kind": "relations"`) and prints its result as one JSON line.

import { unwrapOrThrow } from "@lakesync/core";
import {
	HttpTransport,
	LocalDB,
	MemoryQueue,
	registerSchema,
	SyncCoordinator,
	WebSocketTransport,
} from "./src/index";

/** The string columns of the one table, `todos`, unless a config names others. */
const COLUMNS = ["title", "team"];

export interface ClientConfig {
	/** The gateway's base URL, e.g. http://127.0.0.1:8787 */
	url: string;
	gw: string;
	token: string;
	clientId: string;
	/** Sync over the WebSocket transport (checkpoints still over HTTP) instead of HTTP. */
	ws?: boolean;
	/** Where sql.js finds its sql-wasm.wasm (the browser bundle serves it beside itself). */
	wasmUrl?: string;
	/** The string columns of `todos` (default: title, team). */
	columns?: string[];
}

/** A row of `todos`: its id and its columns. */
export type Row = { id: string } & Record<string, string | null>;

/** Wait for a condition (polled), failing with `what` after `timeoutMs`. */
export async function until(
	what: string,
	check: () => boolean | Promise<boolean>,
	timeoutMs = 60_000,
): Promise<void> {
	const deadline = Date.now() + timeoutMs;
	while (!(await check())) {
		if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
		await new Promise((resolve) => setTimeout(resolve, 20));
	}
}

/** `work`, or an error naming `what` if it has not finished within `timeoutMs` (a hang). */
async function within<T>(what: string, work: Promise<T>, timeoutMs = 60_000): Promise<T> {
	let timer: ReturnType<typeof setTimeout> | undefined;
	const timeout = new Promise<never>((_, reject) => {
		timer = setTimeout(() => reject(new Error(`${what} never finished`)), timeoutMs);
	});
	try {
		return await Promise.race([work, timeout]);
	} finally {
		clearTimeout(timer);
	}
}

export class ProbeClient {
	readonly errors: string[] = [];
	broadcasts = 0;

	private constructor(
		readonly clientId: string,
		readonly db: LocalDB,
		readonly transport: HttpTransport | WebSocketTransport,
		readonly coordinator: SyncCoordinator,
		readonly columns: string[],
	) {
		coordinator.on("onError", (e) => this.errors.push(e.message));
	}

	static async open(cfg: ClientConfig): Promise<ProbeClient> {
		const db = unwrapOrThrow(
			await LocalDB.open({ name: cfg.clientId, backend: "memory", wasmUrl: cfg.wasmUrl }),
		);
		const columns = cfg.columns ?? COLUMNS;
		const schema = { table: "todos", columns: columns.map((name) => ({ name, type: "string" as const })) };
		unwrapOrThrow(await registerSchema(db, schema));
		const http = { baseUrl: cfg.url, gatewayId: cfg.gw, token: cfg.token };
		let transport: HttpTransport | WebSocketTransport;
		if (cfg.ws) {
			const wsUrl = `${cfg.url.replace(/^http/, "ws")}/v1/sync/${cfg.gw}/ws`;
			transport = new WebSocketTransport({ url: wsUrl, token: cfg.token, httpConfig: http });
		} else {
			transport = new HttpTransport(http);
		}
		const coordinator = new SyncCoordinator(db, transport, {
			queue: new MemoryQueue(),
			clientId: cfg.clientId,
			autoSyncIntervalMs: 0,
		});
		const client = new ProbeClient(cfg.clientId, db, transport, coordinator, columns);
		if (transport instanceof WebSocketTransport) {
			transport.onBroadcast((deltas, serverHlc) => {
				client.broadcasts += 1;
				void coordinator.engine.handleBroadcast(deltas, serverHlc);
			});
			transport.connect();
			await until(`${cfg.clientId}: WebSocket open`, () => transport.connected);
		}
		return client;
	}

	async insert(rowId: string, data: Record<string, string>): Promise<void> {
		unwrapOrThrow(await this.coordinator.tracker.insert("todos", rowId, data));
	}

	async update(rowId: string, data: Record<string, string>): Promise<void> {
		unwrapOrThrow(await this.coordinator.tracker.update("todos", rowId, data));
	}

	/** One sync cycle (first: checkpoint, then pull; push), failing if it hangs or errs. */
	async sync(): Promise<void> {
		await within(`${this.clientId}: sync`, this.coordinator.syncOnce());
		if (this.errors.length > 0) throw new Error(`${this.clientId}: ${this.errors.join("; ")}`);
	}

	async rows(): Promise<Row[]> {
		const cols = this.columns.map((c) => `"${c}"`).join(", ");
		const sql = `SELECT _rowId AS id, ${cols} FROM "todos" ORDER BY _rowId`;
		return unwrapOrThrow(await this.db.query<Row>(sql));
	}

	async queued(): Promise<number> {
		return this.coordinator.queueDepth();
	}

	close(): void {
		if (this.transport instanceof WebSocketTransport) this.transport.disconnect();
	}
}

export interface WebSocketScenario {
	url: string;
	gw: string;
	/** Tokens by client id: a, b and c of one team, dora of another. */
	tokens: Record<"a" | "b" | "c" | "dora", string>;
	/** Whether dora's row is visible to the others (no rules) or not (rules by team). */
	doraVisible: boolean;
}

/**
 * On a gateway that has stored nothing: a and b (WebSocket) sync for the first time; a pushes a
 * row, which reaches b as a broadcast; dora pushes a row of another team; c syncs for the first
 * time (pull) and b pulls. Returns what each replica holds and what took how long.
 */
export async function websocketScenario(s: WebSocketScenario) {
	const open = (id: "a" | "b" | "c" | "dora") =>
		ProbeClient.open({ url: s.url, gw: s.gw, token: s.tokens[id], clientId: id, ws: true });
	const [a, b] = [await open("a"), await open("b")];
	const started = Date.now();
	await a.sync();
	await b.sync();
	const firstSyncMs = Date.now() - started;

	await a.insert("r1", { title: "from a", team: "red" });
	await a.sync();
	const pushed = await a.queued();
	await until("b: a's row by broadcast", async () => (await b.rows()).length === 1);
	const bByBroadcast = await b.rows();

	const dora = await open("dora");
	await dora.sync();
	await dora.insert("r2", { title: "from dora", team: "blue" });
	await dora.sync();
	if (s.doraVisible) {
		await until("b: dora's row by broadcast", async () => (await b.rows()).length === 2);
	}
	const c = await open("c");
	await c.sync();
	await b.sync();
	const result = {
		firstSyncMs,
		queuedAfterPush: pushed,
		bBroadcasts: b.broadcasts,
		bByBroadcast,
		a: await a.rows(),
		b: await b.rows(),
		c: await c.rows(),
		dora: await dora.rows(),
	};
	for (const client of [a, b, c, dora]) client.close();
	return result;
}

/** One step of a {@link ScriptScenario}. */
export type Step =
	| { op: "sync" | "rows"; client: string }
	| { op: "insert" | "update"; client: string; rowId: string; data: Record<string, string> }
	/** Wait until the client holds row `rowId` (a broadcast reaching it). */
	| { op: "until"; client: string; rowId: string }
	/** A request of the test's own (e.g. another client's push), which must answer 2xx. */
	| { op: "post"; path: string; token: string; body: unknown };

export interface ScriptScenario {
	url: string;
	gw: string;
	/** Tokens by client id. */
	tokens: Record<string, string>;
	columns?: string[];
	/** Sync over the WebSocket transport instead of HTTP. */
	ws?: boolean;
	steps: Step[];
}

/**
 * Runs the steps in order, each client opened (fresh, in memory) at its first step. Returns
 * what each `rows` step read, in order, and each client's cursor at the end.
 */
export async function scriptScenario(s: ScriptScenario) {
	const clients = new Map<string, ProbeClient>();
	const client = async (id: string) => {
		let c = clients.get(id);
		if (c === undefined) {
			const token = s.tokens[id];
			if (token === undefined) throw new Error(`no token for client ${id}`);
			const cfg = { url: s.url, gw: s.gw, token, clientId: id, columns: s.columns, ws: s.ws };
			c = await ProbeClient.open(cfg);
			clients.set(id, c);
		}
		return c;
	};
	const rows: { client: string; rows: Row[] }[] = [];
	for (const [i, step] of s.steps.entries()) {
		if (step.op === "post") {
			const r = await fetch(`${s.url}${step.path}`, {
				method: "POST",
				headers: { Authorization: `Bearer ${step.token}`, "Content-Type": "application/json" },
				body: JSON.stringify(step.body),
			});
			if (!r.ok) throw new Error(`steps[${i}]: POST ${step.path} answered ${r.status}: ${await r.text()}`);
		} else if (step.op === "sync") {
			await (await client(step.client)).sync();
		} else if (step.op === "rows") {
			rows.push({ client: step.client, rows: await (await client(step.client)).rows() });
		} else if (step.op === "until") {
			const c = await client(step.client);
			await until(`steps[${i}]: ${step.client} holding ${step.rowId}`, async () => {
				return (await c.rows()).some((r) => r.id === step.rowId);
			});
		} else if (step.op === "insert") {
			await (await client(step.client)).insert(step.rowId, step.data);
		} else {
			await (await client(step.client)).update(step.rowId, step.data);
		}
	}
	const cursors: Record<string, string> = {};
	for (const [id, c] of clients) {
		cursors[id] = String(c.coordinator.engine.lastSyncedHlc);
		c.close();
	}
	return { rows, cursors };
}

export interface RelationsScenario {
	kind: "relations";
	url: string;
	gw: string;
	/** The client's token (it sees the todos whose `team` is a list it is a member of). */
	token: string;
	adminToken: string;
	/** Push bodies the admin sends: a membership that adds a list, then one that removes one. */
	join: unknown;
	leave: unknown;
}

/**
 * A WebSocket client under relational rules: it syncs, then the admin adds a membership (the
 * list's todos must arrive by broadcast) and removes another (its todos must leave); a sync
 * after that must not change what it holds. Returns what it held at each step.
 */
export async function relationsScenario(s: RelationsScenario) {
	const client = await ProbeClient.open({
		url: s.url, gw: s.gw, token: s.token, clientId: "alice", ws: true,
	});
	await client.sync();
	const first = await client.rows();
	const admin = async (body: unknown) => {
		const r = await fetch(`${s.url}/v1/sync/${s.gw}/push`, {
			method: "POST",
			headers: { Authorization: `Bearer ${s.adminToken}`, "Content-Type": "application/json" },
			body: JSON.stringify(body),
		});
		if (!r.ok) throw new Error(`admin push: ${r.status} ${await r.text()}`);
	};
	const ids = async () => (await client.rows()).map((r) => r.id).join(",");
	await admin(s.join);
	await until("the joined list's todos by broadcast", async () => (await ids()) === "r1,r2");
	const joined = await client.rows();
	await admin(s.leave);
	await until("the left list's todos evicted by broadcast", async () => (await ids()) === "r2");
	const left = await client.rows();
	await client.sync();
	const synced = await client.rows();
	client.close();
	return { first, joined, left, synced, broadcasts: client.broadcasts };
}

declare global {
	var lakesyncProbe: unknown;
}
globalThis.lakesyncProbe = {
	ProbeClient, HttpTransport, until, websocketScenario, scriptScenario, relationsScenario,
};

if (import.meta.main) {
	const input = process.argv[2] ?? (await Bun.stdin.text()); // a long scenario comes on stdin
	const scenario = JSON.parse(input) as WebSocketScenario | ScriptScenario | RelationsScenario;
	const run =
		"kind" in scenario
			? relationsScenario(scenario)
			: "steps" in scenario
				? scriptScenario(scenario)
				: websocketScenario(scenario);
	run.then(
		(result) => {
			console.log(JSON.stringify(result));
			process.exit(0);
		},
		(error: unknown) => {
			console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
			process.exit(1);
		},
	);
}
