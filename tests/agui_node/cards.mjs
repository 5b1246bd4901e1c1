// Decides two cards one at a time through AG-UI's own HttpAgent, which sends a resume only when it answers every
// open interrupt: an edit of the first card with the second cancelled (left waiting), a dismissal of the second,
// then new words with the third card cancelled (said something else). Prints what the client decoded, one JSON
// line.
import { HttpAgent } from "@ag-ui/client";

import { observedRun } from "./observe.mjs";

const [url, threadId] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });

const run = (parameters) => observedRun(agent, parameters);

const ids = () => agent.pendingInterrupts.map((interrupt) => interrupt.id);
const waiting = (id) => agent.pendingInterrupts.find((interrupt) => interrupt.id === id);

agent.addMessage({ id: "u-1", role: "user", content: "add milk and eggs" });
const proposed = await run({});
const shown = ids();
const [first, second] = agent.pendingInterrupts;
const edited = await run({
  resume: [
    {
      interruptId: first.id,
      status: "resolved",
      payload: { approved: true, editedArgs: { text: "oat milk" }, digest: first.metadata.digest },
    },
    { interruptId: second.id, status: "cancelled" },
  ],
});
const left = ids();
const dismissed = await run({
  resume: [
    {
      interruptId: second.id,
      status: "resolved",
      payload: { approved: false, digest: waiting(second.id).metadata.digest },
    },
  ],
});
const third = ids();
agent.addMessage({ id: "u-2", role: "user", content: "no, that is enough" });
const said = await run({ resume: third.map((id) => ({ interruptId: id, status: "cancelled" })) });
const messages = agent.messages.map((message) => ({ role: message.role, content: message.content ?? null }));
console.log(JSON.stringify({ proposed, shown, edited, left, dismissed, third, said, after: ids(), messages }));
