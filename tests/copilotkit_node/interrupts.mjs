// Holds a conversation with the dial-runtime web surface the way a CopilotKit front end does: CopilotKit's core
// runs the agent (CopilotKitCore.runAgent over the AG-UI HttpAgent it ships with) and its interrupt state answers
// the interrupts (resolving, cancelling, judging expiry by expiresAt). Prints what it saw, one JSON line.
import { HttpAgent } from "@ag-ui/client";
import { CopilotKitCore, ɵInterruptState } from "@copilotkit/core";

const [url, threadId, decision] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });
const core = new CopilotKitCore({ agents__unsafe_dev_only: { notes: agent } });

async function run(resume) {
  const events = [];
  const unsubscribe = agent.subscribe({ onEvent: ({ event }) => events.push(event) });
  let error = null;
  try {
    await core.runAgent({ agent, ...(resume ? { resume } : {}) });
  } catch (caught) {
    error = String(caught);
  } finally {
    unsubscribe.unsubscribe();
  }
  const finished = events.find((event) => event.type === "RUN_FINISHED");
  const failed = events.find((event) => event.type === "RUN_ERROR");
  return {
    types: events.map((event) => event.type),
    outcome: finished ? finished.outcome ?? null : null,
    failed: failed ? { code: failed.code ?? null, message: failed.message } : null,
    results: events.filter((event) => event.type === "TOOL_CALL_RESULT").map((event) => event.toolCallId),
    error,
  };
}

agent.addMessage({ id: "u-1", role: "user", content: "add milk" });
const first = await run();
const interrupts = first.outcome?.type === "interrupt" ? first.outcome.interrupts : [];
const state = new ɵInterruptState();
state.setStandard(interrupts);
const [interrupt] = interrupts;
let action;
if (decision === "malformed") {
  action = { kind: "resume", resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: "yes" } }], toolResults: [] };
} else if (decision === "wait-then-accept") {
  await new Promise((resolve) => setTimeout(resolve, 1500));
  action = state.resolve({ approved: true, digest: interrupt.metadata.digest }, interrupt.id);
  if (action.kind === "expired") {
    // CopilotKit will not answer an interrupt past its expiresAt; the pattern has it abandoned instead.
    action = { kind: "abandon", expired: true, resume: [{ interruptId: interrupt.id, status: "cancelled" }] };
  }
} else {
  action = state.resolve({ approved: decision === "accept", digest: interrupt.metadata.digest }, interrupt.id);
}
for (const result of action.toolResults ?? []) {
  agent.addMessage({ id: `tool-${result.toolCallId}`, role: "tool", toolCallId: result.toolCallId, content: result.content });
}
const second = await run(action.resume);
console.log(JSON.stringify({ first, interrupt, action: { kind: action.kind, expired: action.expired ?? false, resume: action.resume }, second }));
