// Drives the Durable Streams project's AI transports against tapedeck, wired as their READMEs
// wire them, for tests/clients/ai_transports.rs. The app's own routes (the POST that starts a
// generation, the reconnect route) are a fetch handler in this process; everything that
// touches a stream goes to tapedeck over HTTP.
//
//   node transports.mjs aisdk STREAM_URL
//     AI SDK `useChat` with `resume: true`: a generation's UI-message chunks are written by
//     `toDurableStreamResponse`; one reader reads a few and goes away (a reload), a second
//     reconnects through the reconnect route while chunks are still being appended.
//   node transports.mjs tanstack STREAM_URL
//     TanStack AI's chat session: `toDurableChatSessionResponse` appends the user's message
//     and the model's chunks; a new `durableStreamConnection` (a reload) subscribes mid-run.
//
// Prints one JSON line: what the resumed reader got, and what was written.
import { createDurableChatTransport, toDurableStreamResponse } from "@durable-streams/aisdk-transport"
import { durableStreamConnection, toDurableChatSessionResponse } from "@durable-streams/tanstack-ai-transport"
import { readUIMessageStream } from "ai"

const [mode, streamUrl] = process.argv.slice(2)
const API = "http://app.test/api/chat"
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const words = Array.from({ length: 40 }, (_, i) => `word${i} `)

/** Yields `chunks`, a little apart, like a model; `state.done` once the last is out. */
async function* slowly(chunks, state) {
  for (const chunk of chunks) {
    await sleep(15)
    yield chunk
  }
  state.done = true
}

async function aisdk() {
  const written = [
    { type: "start", messageId: "m-1" },
    { type: "start-step" },
    { type: "text-start", id: "t-1" },
    ...words.map((delta) => ({ type: "text-delta", id: "t-1", delta })),
    { type: "text-end", id: "t-1" },
    { type: "finish-step" },
    { type: "finish" },
  ]
  const generation = { done: false }
  let active = null
  // The app: POST /api/chat starts a generation into the stream; GET /api/chat/:id/stream
  // says where the active one is (204 when none), as the README's "optimal setup" does.
  const app = async (url, init) => {
    if (init?.method === "POST") {
      active = streamUrl
      return toDurableStreamResponse({ source: slowly(written, generation), stream: { writeUrl: streamUrl } })
    }
    if (!active) return new Response(null, { status: 204 })
    return Response.json({ streamUrl: active }, { status: 200, headers: { Location: active } })
  }
  const transport = createDurableChatTransport({ api: API, fetchClient: app })
  const user = { id: "u-1", role: "user", parts: [{ type: "text", text: "tell me" }] }

  const first = new AbortController()
  const sent = await transport.sendMessages({
    trigger: "submit-message", chatId: "chat-1", messageId: undefined, messages: [user],
    abortSignal: first.signal,
  })
  const reader = sent.getReader()
  const before = []
  for (let i = 0; i < 5; i++) before.push((await reader.read()).value)
  // The page reloads: this reader goes, and useChat({ resume: true }) reconnects.
  first.abort()
  await reader.cancel().catch(() => {})
  const midResponse = !generation.done
  const resumed = await transport.reconnectToStream({ chatId: "chat-1" })
  const [chunks, forMessage] = resumed.tee()
  const got = []
  for (const reading = chunks.getReader(); ;) {
    const { value, done } = await reading.read()
    if (done) break
    got.push(value)
  }
  let message
  for await (const snapshot of readUIMessageStream({ stream: forMessage })) message = snapshot
  const text = message.parts.filter((p) => p.type === "text").map((p) => p.text).join("")
  console.log(JSON.stringify({ midResponse, before, got, written, text, expected: words.join("") }))
}

async function tanstack() {
  const run = [
    { type: "RUN_STARTED", runId: "r-1" },
    { type: "TEXT_MESSAGE_START", messageId: "a-1", role: "assistant" },
    ...words.map((delta) => ({ type: "TEXT_MESSAGE_CONTENT", messageId: "a-1", delta })),
    { type: "TEXT_MESSAGE_END", messageId: "a-1" },
    { type: "RUN_FINISHED", runId: "r-1" },
  ]
  const generation = { done: false }
  let writing = null
  const app = async (url, init) => {
    const { messages } = JSON.parse(init.body)
    const response = await toDurableChatSessionResponse({
      stream: { writeUrl: streamUrl },
      newMessages: [messages[messages.length - 1]],
      responseStream: slowly(run, generation),
      waitUntil: (task) => { writing = task },
    })
    return response
  }
  const user = { id: "u-1", role: "user", parts: [{ type: "text", content: "tell me" }] }
  const first = durableStreamConnection({ sendUrl: API, readUrl: streamUrl, fetchClient: app })
  await first.send([user])
  await sleep(200)
  // A reload mid-run: a new connection, no offset; the catch-up comes as one snapshot.
  const midResponse = !generation.done
  const page = durableStreamConnection({ sendUrl: API, readUrl: streamUrl, fetchClient: app })
  const seen = []
  const reading = new AbortController()
  for await (const chunk of page.subscribe(reading.signal)) {
    seen.push(chunk)
    if (chunk.type === "RUN_FINISHED") break
  }
  reading.abort()
  await writing
  console.log(JSON.stringify({ midResponse, seen, expected: words.join("") }))
}

await (mode === "aisdk" ? aisdk() : tanstack())
process.exit(0)
