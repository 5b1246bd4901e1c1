// Holds one conversation with the dial-runtime web surface through AG-UI's own HttpAgent: the person's words, a
// run that ends on an interrupt, a resume that accepts it. Prints what the client decoded as one JSON line.
import { HttpAgent } from "@ag-ui/client";

import { observedRun } from "./observe.mjs";

const [url, threadId, words] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });

const run = (parameters) => observedRun(agent, parameters);

agent.addMessage({ id: "u-1", role: "user", content: words });
const first = await run({});
const interrupt = first.outcome.interrupts[0];
const second = await run({
  resume: [
    {
      interruptId: interrupt.id,
      status: "resolved",
      payload: { approved: true, digest: interrupt.metadata.digest },
    },
  ],
});
const messages = agent.messages.map((message) => ({ role: message.role, content: message.content ?? null }));
console.log(JSON.stringify({ first, second, interrupt, messages }));
