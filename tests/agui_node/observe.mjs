// What a run shows AG-UI's own HttpAgent, shared by the scripts that drive the web surface with it.

// Runs `agent` with `parameters` and returns what it decoded: every event's type, the outcome RUN_FINISHED
// carried, a RUN_ERROR's code and message, and each tool result's [toolCallId, status].
export async function observedRun(agent, parameters) {
  const seen = { types: [], outcome: null, error: null, results: [] };
  await agent.runAgent(parameters, {
    onEvent({ event }) {
      seen.types.push(event.type);
      if (event.type === "TOOL_CALL_RESULT") seen.results.push([event.toolCallId, JSON.parse(event.content).status]);
    },
    onRunFinishedEvent({ event }) {
      seen.outcome = event.outcome ?? null;
    },
    onRunErrorEvent({ event }) {
      seen.error = { code: event.code ?? null, message: event.message };
    },
  });
  return seen;
}
