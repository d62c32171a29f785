// client.mjs drives `agentpool acp` with the official TypeScript ACP SDK's
// client side (ClientSideConnection), as an editor would, and prints one
// JSON line per step on stdout for TestACPFaceOfficialTSClient to judge:
//
//	{"step": "initialize", "ok": true, ...what the step saw}
//	{"step": "prompt-1", "ok": false, "error": {"code": ..., "message": ..., "data": ...}}
//
// Its one argument is the scenario as JSON:
//
//	{"mode": "first" | "reload", "command": [program, args...], "cwd": repo,
//	 "prompts": [text, text], "switchTo": agent id, "choose": permission kind,
//	 "mcpServers": the editor's MCP servers (first),
//	 "sessionId": id (resume, reload), "outside": a directory in no
//	 repository, "disabled": a disabled agent, "slow": an agent whose turn
//	 runs until cancelled, "started": the text it sends first (bad)}
//
// "first": initialize, session/new, a prompt whose permission request is
// answered with the option of kind "choose", session/set_config_option
// "agent" to switchTo, a second prompt, session/list, then SIGKILL of the
// agent process (the connection must end). "reload": a new process,
// initialize, session/load of sessionId (its history arrives as updates),
// session/close, then stdin closed (the process must exit). "resume": a
// new process, initialize, session/resume of sessionId (no replay), then
// stdin closed. "bad": requests an editor may get wrong, each of which
// must be refused. "nodaemon": initialize must fail (no daemon runs).
//
// The agent process inherits this process's environment (AGENTPOOL_HOME);
// its stderr goes to this process's stderr. The script exits 0 when it ran
// every step, 1 after the first failed one.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const scenario = JSON.parse(process.argv[2] ?? "{}");
const stepTimeoutMs = scenario.stepTimeoutMs ?? 60000;

function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + "\n");
}

function errorOf(err) {
  if (err && typeof err === "object" && typeof err.code === "number") {
    return { code: err.code, message: err.message, data: err.data ?? null };
  }
  return { code: null, message: String(err?.message ?? err), data: null };
}

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${stepTimeoutMs} ms`)), stepTimeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// Recorder is the Client side: it keeps every session/update and answers
// permission requests with the option of the scenario's kind.
class Recorder {
  constructor(choose) {
    this.choose = choose;
    this.updates = [];
    this.permissions = [];
    this.fsCalls = [];
  }

  async requestPermission(params) {
    const option = params.options.find((o) => o.kind === this.choose);
    this.permissions.push({
      sessionId: params.sessionId,
      toolCall: params.toolCall,
      options: params.options,
      chosen: option?.optionId ?? null,
      at: this.updates.length,
    });
    if (!option) {
      return { outcome: { outcome: "cancelled" } };
    }
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  }

  async sessionUpdate(params) {
    this.updates.push({ sessionId: params.sessionId, update: params.update });
  }

  // agentpool acp serves the pool's worktrees itself; an fs call from it
  // is recorded (the test says whether it may happen) and refused.
  async readTextFile(params) {
    this.fsCalls.push({ method: "fs/read_text_file", path: params.path });
    throw acp.RequestError.methodNotFound("fs/read_text_file");
  }

  async writeTextFile(params) {
    this.fsCalls.push({ method: "fs/write_text_file", path: params.path });
    throw acp.RequestError.methodNotFound("fs/write_text_file");
  }

  // since returns a summary of the updates from index from on.
  since(from) {
    return summarize(this.updates.slice(from));
  }
}

// summarize keeps what the test asserts of a run of updates: their kinds in
// order, the text of message chunks by kind, tool calls, the names of the
// last available commands, and the sessions they were for.
function summarize(list) {
  const kinds = [];
  const text = {};
  const toolCalls = [];
  const sessions = new Set();
  let commands = null;
  for (const { sessionId, update } of list) {
    sessions.add(sessionId);
    const kind = update.sessionUpdate;
    kinds.push(kind);
    if (kind.endsWith("_chunk") && update.content?.type === "text") {
      text[kind] = (text[kind] ?? "") + update.content.text;
    }
    if (kind === "available_commands_update") {
      commands = update.availableCommands.map((c) => c.name);
    }
    if (kind === "tool_call" || kind === "tool_call_update") {
      toolCalls.push({ kind, toolCallId: update.toolCallId, title: update.title ?? null, status: update.status ?? null });
    }
  }
  return { kinds, text, toolCalls, commands, sessions: [...sessions] };
}

async function main() {
  const [program, ...args] = scenario.command;
  const child = spawn(program, args, { stdio: ["pipe", "pipe", "inherit"], env: process.env });
  let exit = null;
  const exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => {
      exit = { code, signal };
      resolve(exit);
    }),
  );
  child.stdin.on("error", () => {}); // EPIPE once the agent is killed
  const recorder = new Recorder(scenario.choose ?? "allow_once");
  const conn = new acp.ClientSideConnection(
    () => recorder,
    acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)),
  );

  // refused runs fn, which must fail, and prints the error it got; an
  // answer instead is printed with ok false.
  async function refused(name, fn) {
    try {
      const res = await withTimeout(fn(), name);
      emit(name, { ok: false, result: res ?? null });
    } catch (err) {
      emit(name, { ok: true, error: errorOf(err) });
    }
  }

  if (scenario.mode === "nodaemon") {
    await refused("initialize", () =>
      conn.initialize({ protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {}, clientInfo: { name: "agentpool-ts-test", version: "1" } }),
    );
    child.stdin.end();
    emit("exit", { ok: true, exit: await exited });
    process.exit(0);
  }

  // step runs fn, prints its result, and stops the script at a failure.
  async function step(name, fn) {
    try {
      const fields = await withTimeout(fn(), name);
      emit(name, { ok: true, ...fields });
      return fields;
    } catch (err) {
      await new Promise((r) => setTimeout(r, 100)); // an exit explains an EPIPE
      emit(name, { ok: false, error: errorOf(err), exit });
      child.kill("SIGKILL");
      process.exit(1);
    }
  }

  const init = await step("initialize", async () => {
    const res = await conn.initialize({
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "agentpool-ts-test", version: "1" },
    });
    return { result: res };
  });

  if (scenario.mode === "first") {
    await runFirst(conn, recorder, step, init.result);
    await step("kill", async () => {
      child.kill("SIGKILL");
      const how = await exited;
      await conn.closed;
      return { exit: how, connectionClosed: conn.signal.aborted };
    });
  } else if (scenario.mode === "resume") {
    await step("session/resume", async () => {
      const from = recorder.updates.length;
      const res = await conn.resumeSession({ sessionId: scenario.sessionId, cwd: scenario.cwd, mcpServers: [] });
      await new Promise((r) => setTimeout(r, scenario.settleMs ?? 300));
      return { result: res, updates: recorder.since(from) };
    });
    await step("exit", async () => {
      child.stdin.end();
      return { exit: await exited, fsCalls: recorder.fsCalls };
    });
  } else if (scenario.mode === "bad") {
    await runBad(conn, recorder, step, refused);
    await step("exit", async () => {
      child.stdin.end();
      return { exit: await exited };
    });
  } else if (scenario.mode === "reload") {
    await runReload(conn, recorder, step);
    await step("exit", async () => {
      child.stdin.end();
      return { exit: await exited, fsCalls: recorder.fsCalls };
    });
  } else {
    throw new Error(`unknown mode ${scenario.mode}`);
  }
  process.exit(0);
}

// prompt sends text and reports the answer and the updates and permission
// requests seen until it, then those that came within settleMs after it
// (late: the spec wants every update of a turn before its answer).
async function prompt(conn, recorder, sessionId, text) {
  const from = recorder.updates.length;
  const permFrom = recorder.permissions.length;
  const res = await conn.prompt({ sessionId, prompt: [{ type: "text", text }] });
  const answeredAt = recorder.updates.length;
  await new Promise((r) => setTimeout(r, scenario.settleMs ?? 300));
  return {
    result: res,
    updates: summarize(recorder.updates.slice(from, answeredAt)),
    late: summarize(recorder.updates.slice(answeredAt)),
    permissions: recorder.permissions.slice(permFrom),
  };
}

async function runFirst(conn, recorder, step, init) {
  const created = await step("session/new", async () => {
    const from = recorder.updates.length;
    const res = await conn.newSession({ cwd: scenario.cwd, mcpServers: scenario.mcpServers ?? [] });
    const answeredAt = recorder.updates.length;
    await new Promise((r) => setTimeout(r, scenario.settleMs ?? 300));
    return {
      result: res,
      updates: summarize(recorder.updates.slice(from, answeredAt)),
      late: summarize(recorder.updates.slice(answeredAt)),
    };
  });
  const sessionId = created.result.sessionId;

  await step("prompt-1", () => prompt(conn, recorder, sessionId, scenario.prompts[0]));

  await step("set_config_option", async () => {
    const from = recorder.updates.length;
    const res = await conn.setSessionConfigOption({ sessionId, configId: "agent", value: scenario.switchTo });
    return { result: res, updates: recorder.since(from) };
  });

  await step("prompt-2", () => prompt(conn, recorder, sessionId, scenario.prompts[1]));

  if (init.agentCapabilities?.sessionCapabilities?.list) {
    await step("session/list", async () => ({ result: await conn.listSessions({ cwd: scenario.cwd }) }));
  } else {
    emit("session/list", { ok: false, error: { code: null, message: "agentCapabilities.sessionCapabilities.list not advertised", data: init.agentCapabilities ?? null } });
  }
}

async function runReload(conn, recorder, step) {
  const sessionId = scenario.sessionId;
  await step("session/load", async () => {
    const from = recorder.updates.length;
    const res = await conn.loadSession({ sessionId, cwd: scenario.cwd, mcpServers: [] });
    const answeredAt = recorder.updates.length;
    await new Promise((r) => setTimeout(r, scenario.settleMs ?? 300));
    return {
      result: res,
      updates: summarize(recorder.updates.slice(from, answeredAt)),
      late: summarize(recorder.updates.slice(answeredAt)),
    };
  });
  await step("session/close", async () => ({ result: await conn.closeSession({ sessionId }) }));
}

// runBad sends what an editor may get wrong; each must be refused with an
// error, and a session made to try an unknown agent is closed again.
async function runBad(conn, recorder, step, refused) {
  const unknown = "s-NOSUCHSESSION";
  await refused("session/new outside a repository", () => conn.newSession({ cwd: scenario.outside, mcpServers: [] }));
  await refused("session/new relative cwd", () => conn.newSession({ cwd: "relative/dir", mcpServers: [] }));
  await refused("session/load unknown", () => conn.loadSession({ sessionId: unknown, cwd: scenario.cwd, mcpServers: [] }));
  await refused("session/prompt unknown", () => conn.prompt({ sessionId: unknown, prompt: [{ type: "text", text: "hi" }] }));
  await refused("session/close unknown", () => conn.closeSession({ sessionId: unknown }));
  const created = await step("session/new", async () => ({ result: await conn.newSession({ cwd: scenario.cwd, mcpServers: [] }) }));
  const sessionId = created.result.sessionId;
  await refused("set_config_option unknown agent", () =>
    conn.setSessionConfigOption({ sessionId, configId: "agent", value: "no-such-agent" }),
  );
  await refused("set_config_option unknown option", () =>
    conn.setSessionConfigOption({ sessionId, configId: "no-such-option", value: "x" }),
  );
  await refused("set_config_option disabled agent", () =>
    conn.setSessionConfigOption({ sessionId, configId: "agent", value: scenario.disabled }),
  );

  // A prompt while one runs is refused; session/cancel ends the running one.
  await step("set_config_option slow", async () => ({
    result: await conn.setSessionConfigOption({ sessionId, configId: "agent", value: scenario.slow }),
  }));
  const from = recorder.updates.length;
  const running = conn.prompt({ sessionId, prompt: [{ type: "text", text: "take your time" }] }).then(
    (result) => ({ result }),
    (err) => ({ error: errorOf(err) }),
  );
  await step("prompt started", async () => {
    while (!(recorder.since(from).text.agent_message_chunk ?? "").includes(scenario.started)) {
      await new Promise((r) => setTimeout(r, 20));
    }
    return {};
  });
  await refused("session/prompt while one runs", () =>
    conn.prompt({ sessionId, prompt: [{ type: "text", text: "and this?" }] }),
  );
  await step("session/cancel", async () => {
    await conn.cancel({ sessionId });
    const got = await running;
    if (got.error) {
      throw Object.assign(new Error(got.error.message), got.error);
    }
    return { result: got.result, updates: recorder.since(from) };
  });
  await refused("set_config_option unknown option after a turn", () =>
    conn.setSessionConfigOption({ sessionId, configId: "no-such-option", value: "x" }),
  );
  await step("session/close", async () => ({ result: await conn.closeSession({ sessionId }), sessionId }));
}

main().catch((err) => {
  emit("script", { ok: false, error: errorOf(err) });
  process.exit(1);
});
