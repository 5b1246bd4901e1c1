// Starts a run through AG-UI's own HttpAgent and stops it with abortRun() once the agent's text begins to arrive,
// as a Stop button does. Prints what the client decoded before the stop, one JSON line.
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, user] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId, headers: { "x-user": user } });
const seen = { types: [], error: null, failed: null };

agent.addMessage({ id: "u-1", role: "user", content: "tell me a story" });
try {
  await agent.runAgent(
    {},
    {
      onEvent({ event }) {
        seen.types.push(event.type);
        if (event.type === "TEXT_MESSAGE_CONTENT") agent.abortRun();
      },
      onRunErrorEvent({ event }) {
        seen.error = { code: event.code ?? null, message: event.message };
      },
    },
  );
} catch (error) {
  seen.failed = String(error);
}
console.log(JSON.stringify(seen));
