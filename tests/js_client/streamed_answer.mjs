// Streams one answer with the official LangGraph JS client, as DeerFlow's frontend does (streamMode includes
// messages-tuple), and prints every part it saw as one JSON object; tests/test_api_js_client.py asserts on it.
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.env.HARTFLOW_API_URL, apiKey: process.env.HARTFLOW_API_TOKEN });
const thread = await client.threads.create();
const parts = [];
for await (const part of client.runs.stream(thread.thread_id, "lead_agent", {
  input: { messages: [{ role: "user", content: "Tell me a story" }] },
  streamMode: ["values", "messages-tuple"],
})) {
  parts.push({ event: part.event, data: part.data });
}
console.log(JSON.stringify({ thread_id: thread.thread_id, parts }));
