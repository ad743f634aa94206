// Drives hartflow serve with the official LangGraph JS client, as DeerFlow's frontend does: create a thread,
// stream a run that pauses on ask_clarification, read the interrupt, resume with command.resume, stream to the
// end. Prints one JSON object with everything it saw; tests/test_api_js_client.py asserts on it.
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.env.HARTFLOW_API_URL, apiKey: process.env.HARTFLOW_API_TOKEN });
const modes = ["values", "messages-tuple", "updates", "custom"];

async function collect(parts) {
  const seen = [];
  for await (const part of parts) seen.push({ event: part.event, data: part.data });
  return seen;
}

const thread = await client.threads.create({ metadata: { client: "js" } });
let created = null;
const first = await collect(
  client.runs.stream(thread.thread_id, "lead_agent", {
    input: { messages: [{ role: "user", content: "Paint the fence" }] },
    streamMode: modes,
    onRunCreated: (meta) => { created = meta; },
  }),
);
const paused = await client.threads.get(thread.thread_id);
const state = await client.threads.getState(thread.thread_id);
const resumed = await collect(
  client.runs.stream(thread.thread_id, "lead_agent", { command: { resume: "blue" }, streamMode: modes }),
);
const done = await client.threads.get(thread.thread_id);
const runs = await client.runs.list(thread.thread_id);

console.log(JSON.stringify({
  thread_id: thread.thread_id,
  created,
  first,
  paused: { status: paused.status, interrupts: paused.interrupts },
  state: { next: state.next, tasks: state.tasks },
  resumed,
  done: { status: done.status, values: done.values },
  runs: runs.map((run) => ({ run_id: run.run_id, status: run.status })),
}));
