// Drives `agentpool mcp` with the official TypeScript MCP SDK's client,
// for TestMCPServerOfficialTSClient. argv[2] is a JSON object: bin (the
// agentpool binary), home (its AGENTPOOL_HOME), cwd, and step:
//   "start":  lists the tools, creates a session of the demo agent, prompts
//             it and waits (wait_turn with no turn) until its permission
//             request is pending;
//   "answer": answers the pending request of session (a new MCP server);
//   "ended":  once the turn has ended, waits for it with no turn given (a
//             new MCP server, after the end), and checks an empty session
//             argument.
// Each result is printed as one JSON line {"step", ...}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const arg = JSON.parse(process.argv[2]);
const out = (o) => console.log(JSON.stringify(o));
const text = (r) => (r.content || []).map((x) => x.text || "").join("\n");

const transport = new StdioClientTransport({
  command: arg.bin,
  args: ["mcp"],
  env: { ...process.env, AGENTPOOL_HOME: arg.home },
  cwd: arg.cwd,
  stderr: "inherit",
});
const client = new Client({ name: "agentpool-ts-check", version: "1.0.0" });
await client.connect(transport);
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  return { error: !!r.isError, text: text(r) };
};

if (arg.step === "start") {
  const tools = (await client.listTools()).tools;
  const unions = tools.filter((t) => /"type":\[/.test(JSON.stringify(t.inputSchema))).map((t) => t.name);
  out({ step: "tools", names: tools.map((t) => t.name), unions });
  const created = await call("create_session", { repo: arg.cwd, agent: "demo" });
  const session = (created.text.match(/\bs-[A-Z0-9]+\b/) || [])[0] || "";
  out({ step: "create", session, ...created });
  out({ step: "prompt", ...(await call("prompt", { session, text: "add a greeting" })) });
  out({ step: "wait_pending", ...(await call("wait_turn", { session })) });
} else if (arg.step === "answer") {
  const pending = await call("list_permissions", { session: arg.session });
  const request = (pending.text.match(/request ([A-Z0-9]{26})/) || [])[1] || "";
  out({ step: "answer", request, ...(await call("answer_permission", { session: arg.session, request, choice: "allow_once" })) });
} else {
  out({ step: "wait_ended", ...(await call("wait_turn", { session: arg.session })) });
  out({ step: "empty", ...(await call("get_session", { session: "" })) });
}
await client.close();
