// An independent MCP client for memwatch: the official TypeScript SDK
// spawns `memwatch mcp` over stdio, lists its tools and calls recall_memory
// and memory_read, including a path that leaves the root. Run by
// `make mcp-e2e`; usage: node client.mjs /path/to/memwatch
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: node client.mjs /path/to/memwatch");
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), "memwatch-mcp-node-"));
const put = (p, s) => { mkdirSync(join(p, ".."), { recursive: true }); writeFileSync(p, s); };
const sess = join(dir, "sessions", "s1");
const facts = join(dir, "facts", "f1");
put(join(sess, "working-memory", "detail", "auth-design.md"), "# Auth\n\nDecided to use JWT tokens with refresh rotation.\n");
put(join(sess, "messages.jsonl"),
  '{"role":"user","content":"how should authentication work?"}\n' +
  '{"role":"assistant","content":[{"type":"tool_use","name":"Grep","input":{"pattern":"authentication"}}]}\n');
put(join(facts, "facts", "user.md"), "# User\n\n> Summary: name\n\n- name: Ada\n");
put(join(dir, "secret.md"), "db password hunter2\n");
const policy = join(dir, "policy.yaml");
writeFileSync(policy, `version: 1
stores:
  - name: sessions
    layout: session-detail
    paths: [${JSON.stringify(join(dir, "sessions", "*"))}]
  - name: facts
    layout: facts-episodes
    paths: [${JSON.stringify(join(dir, "facts", "*"))}]
`);

async function connect(root) {
  const transport = new StdioClientTransport({
    command: bin,
    args: ["mcp", "--policy", policy, "--state-dir", join(dir, "state"), "--root", root],
    stderr: "inherit",
  });
  const client = new Client({ name: "memwatch-node-e2e", version: "1.0.0" });
  await client.connect(transport);
  return client;
}
const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("");

let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.message}`);
  }
}

const s = await connect(sess);
await check("session-detail root lists recall_memory", async () => {
  const { tools } = await s.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["memory_changes", "recall_memory", "recall_show"]);
  const recall = tools.find((t) => t.name === "recall_memory");
  assert.deepEqual(recall.inputSchema.required, ["query"]);
  for (const scope of ["all", "detail", "messages"]) assert.ok(recall.inputSchema.properties.scope.enum.includes(scope), scope);
});
await check("recall_memory finds a word inside a tool call, with citations", async () => {
  const res = await s.callTool({ name: "recall_memory", arguments: { query: "authentication" } });
  assert.equal(res.isError ?? false, false, text(res));
  const out = text(res);
  assert.match(out, /^Found 2 result\(s\) for: "authentication"/);
  assert.match(out, /Citation: messages\.jsonl#L2/);
  assert.match(out, /\[tool: Grep\]/);
});
await check("recall_memory scope detail", async () => {
  const res = await s.callTool({ name: "recall_memory", arguments: { query: "JWT", scope: "detail", limit: 1 } });
  assert.match(text(res), /Citation: detail\/auth-design\.md#L3/);
});
await check("recall_show reads around a citation, a message as role: text", async () => {
  const res = await s.callTool({ name: "recall_show", arguments: { citation: "messages.jsonl#L2", context: 1 } });
  assert.equal(res.isError ?? false, false, text(res));
  assert.match(text(res), /> L2: assistant: /);
  assert.match(text(res), /  L1: user: /);
});
await check("recall_memory with a bad scope is an error result", async () => {
  const res = await s.callTool({ name: "recall_memory", arguments: { query: "x", scope: "everything" } });
  assert.equal(res.isError, true);
});
await s.close();

const f = await connect(facts);
await check("memory_read reads a fact file", async () => {
  const res = await f.callTool({ name: "memory_read", arguments: { path: "facts/user.md" } });
  assert.equal(res.isError ?? false, false, text(res));
  assert.equal(text(res), "# User\n\n> Summary: name\n\n- name: Ada\n");
});
await check("memory_read of ../ is refused", async () => {
  const res = await f.callTool({ name: "memory_read", arguments: { path: "../../secret.md" } });
  assert.equal(res.isError, true);
  assert.doesNotMatch(text(res), /hunter2/);
  assert.match(text(res), /outside/);
});
await check("resources list the memory files", async () => {
  const { resources } = await f.listResources();
  assert.deepEqual(resources.map((r) => r.name), ["facts/user.md"]);
  const read = await f.readResource({ uri: resources[0].uri });
  assert.match(read.contents[0].text, /name: Ada/);
});
await f.close();

rmSync(dir, { recursive: true, force: true });
if (failed) {
  console.log(`${failed} check(s) failed`);
  process.exit(1);
}
console.log("memwatch mcp: every check passed with the TypeScript SDK client");
