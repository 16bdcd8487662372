// Drives tapedeck's gRPC recorder (memory.v1.ResponseRecorderService) with @grpc/grpc-js and
// @grpc/proto-loader, for tests/clients/foreign_grpc_js.rs, making the calls the way Memory Service's
// TypeScript helpers (`typescript/vercelai/src/index.ts` in chirino/memory-service) make them:
//
// - the proto loaded with keepCase, longs and enums as String, defaults and oneofs on;
// - one client a target, insecure credentials, no deadline, no metadata;
// - withMemoryService's recorder: one Record call whose every message carries the id, each
//   write waiting for the previous one's callback; at the end a message with the id and
//   `complete: true` and no content, then `call.end()`, then the answer awaited, each of the two
//   waits bounded by 5 s after which the call is cancelled (`call.cancel()`);
// - memoryServiceReplay: Replay, each non-empty `content` kept, done at 'end';
// - memoryServiceCancel: Cancel (a unary call with a callback);
// - memoryServiceResumeCheck: CheckRecordings with a list of ids.
//
// Conversation ids: the helpers load their own copy of the contract, where `conversation_id`
// is a proto `string`, and pass the id as a JS string. tapedeck's contract declares it `bytes`,
// the same wire type. So this script loads tapedeck's contract as the helpers declare it: a
// copy in a temporary directory whose id fields say `string`, and nothing else changed. Ids go
// in and come back as JS strings, as they do for the helpers.
//
// Usage: node grpc_js_recorder.mjs HOST:PORT   (a server started with a short --producer-grace)
// Prints one JSON line per check, named after the helper function it emulates; exits 1 if any
// check failed.
import { randomUUID } from "node:crypto"
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import grpc from "@grpc/grpc-js"
import protoLoader from "@grpc/proto-loader"

const target = process.argv[2]
const PROTO_ROOT = fileURLToPath(new URL("../../proto", import.meta.url))
// The helpers' bound on each of complete()'s two waits.
const COMPLETE_TIMEOUT_MS = 5000
const WAIT_MS = 20000
// The whole run; a hang anywhere fails the run rather than the test harness's patience.
const RUN_TIMEOUT_MS = 120000

// tapedeck's contract with its ids declared as the helpers declare them (see the top).
const CONTRACT = "memory/v1/response_recorder.proto"
const asHelpers = mkdtempSync(join(tmpdir(), "grpc-js-contract-"))
mkdirSync(join(asHelpers, "memory/v1"), { recursive: true })
const contract = readFileSync(join(PROTO_ROOT, CONTRACT), "utf8")
const stringIds = contract.replace(/\bbytes (conversation_ids?) =/g, "string $1 =")
if (stringIds.match(/string conversation_ids? =/g)?.length !== 5) throw new Error("the contract's id fields moved")
writeFileSync(join(asHelpers, CONTRACT), stringIds)

const packageDefinition = await protoLoader.load(CONTRACT, {
  includeDirs: [asHelpers, PROTO_ROOT],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
})
const { ResponseRecorderService } = grpc.loadPackageDefinition(packageDefinition).memory.v1
const newClient = () => new ResponseRecorderService(target, grpc.credentials.createInsecure())

let failed = 0
function check(name, ok, detail) {
  if (!ok) failed += 1
  console.log(JSON.stringify(ok ? { ok, check: name } : { ok, check: name, detail }))
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const TIMED_OUT = Symbol("timed out")
async function within(promise, ms) {
  let timer
  try {
    return await Promise.race([promise, new Promise((resolve) => (timer = setTimeout(() => resolve(TIMED_OUT), ms)))])
  } finally {
    clearTimeout(timer)
  }
}
// Polls `probe` until it holds (true) or WAIT_MS pass (false).
async function until(probe) {
  const deadline = Date.now() + WAIT_MS
  for (;;) {
    if (await probe()) return true
    if (Date.now() > deadline) return false
    await sleep(10)
  }
}
const utf8Equal = (got, want) => Buffer.from(got, "utf8").equals(Buffer.from(want, "utf8"))
const show = (text) => (text.length > 200 ? `${JSON.stringify(text.slice(0, 200))}… (${text.length} chars)` : JSON.stringify(text))

// withMemoryService's recorder: one Record call a response.
class Recorder {
  constructor(client, id) {
    this.id = id
    this.writes = Promise.resolve()
    this.answer = new Promise((resolve, reject) => {
      this.call = client.Record((error, response) => (error ? reject(error) : resolve(response)))
      this.call.on("error", reject)
    })
    // Read by whoever awaits it; a rejection nobody awaits yet must not end the process.
    this.answer.catch(() => {})
  }

  write(message) {
    this.writes = this.writes.then(
      () => new Promise((resolve, reject) => this.call.write(message, (error) => (error ? reject(error) : resolve()))),
    )
    return this.writes
  }

  record(chunk) {
    return this.write({ conversation_id: this.id, content: chunk })
  }

  // What the helpers' complete() does; returns which wait timed out, if one did, and the answer.
  async complete() {
    const wrote = await within(this.write({ conversation_id: this.id, complete: true }), COMPLETE_TIMEOUT_MS)
    if (wrote === TIMED_OUT) {
      this.call.cancel()
      return { timedOut: "writes" }
    }
    this.call.end()
    const answer = await within(this.answer, COMPLETE_TIMEOUT_MS)
    if (answer === TIMED_OUT) {
      this.call.cancel()
      return { timedOut: "answer" }
    }
    return { answer }
  }
}

// memoryServiceReplay, keeping also how the stream ended: resolves once the stream has both
// ended and told its status. `onContent` sees the text so far after each message.
function replay(client, id, onContent = () => {}) {
  return new Promise((resolve) => {
    const chunks = []
    const redirects = []
    let status = null
    let ended = false
    const call = client.Replay({ conversation_id: id })
    const done = () => {
      if (status && (ended || status.code !== grpc.status.OK)) {
        const trailer = (key) => status.metadata.get(key).map(String)[0] ?? null
        resolve({
          text: chunks.join(""),
          messages: chunks.length,
          redirects,
          code: status.code,
          details: status.details,
          tapedeckStatus: trailer("tapedeck-status"),
          reason: trailer("tapedeck-reason"),
        })
      }
    }
    call.on("data", (message) => {
      if (typeof message.redirect_address === "string" && message.redirect_address) {
        redirects.push(message.redirect_address)
        return
      }
      if (typeof message.content === "string" && message.content) {
        chunks.push(message.content)
        onContent(chunks.join(""))
      }
    })
    // The status event carries the same code; without a listener 'error' would throw.
    call.on("error", () => {})
    call.on("status", (s) => {
      status = s
      done()
    })
    call.on("end", () => {
      ended = true
      done()
    })
  })
}

// A replay followed live: `seen` holds the text delivered so far, `ended` the final result.
function follow(client, id) {
  const reader = { seen: "", endedAt: null }
  reader.ended = replay(client, id, (text) => (reader.seen = text)).then((result) => {
    reader.endedAt = Date.now()
    return result
  })
  return reader
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => client[method](request, (error, response) => (error ? reject(error) : resolve(response))))
}

// memoryServiceCancel.
const cancel = (client, id) => unary(client, "Cancel", { conversation_id: id })

// memoryServiceResumeCheck.
async function resumeCheck(client, ids) {
  const response = await unary(client, "CheckRecordings", { conversation_ids: ids })
  return response?.conversation_ids ?? []
}

const ended = (result, status) =>
  result.code === grpc.status.OK && result.tapedeckStatus === status && result.redirects.length === 0
const describe = (result) =>
  `code ${result.code} (${result.details}), tapedeck-status ${result.tapedeckStatus}, ${result.messages} messages, text ${show(result.text)}`

// Realistic LLM output as a stream yields it. The field is a proto `string`, so every message
// must be valid UTF-8 on its own: a JS string can only be cut between UTF-16 code units, and a
// cut inside a surrogate pair leaves lone surrogates that protobufjs would encode as invalid
// UTF-8 (which the server must refuse). So characters are "split across messages" at code point
// boundaries inside one user-perceived character: an emoji ZWJ sequence, a skin-tone modifier,
// a flag's two regional indicators, a combining accent, a Hangul syllable's jamo. Whether the
// server keeps every code point and every message boundary unchanged is what the replay checks.
const LLM_CHUNKS = [
  "Hello",
  ",",
  " world",
  "!",
  "  Two  spaces",
  "   ",
  "",
  "\n",
  "line\r\nbreaks\rlone CR",
  "\n\n",
  "\ttab, then ",
  "🦀",
  " crab; coder ",
  "👩",
  "\u200d",
  "💻",
  "; thumbs ",
  "👍",
  "🏽",
  "; flag ",
  "🇫",
  "🇷",
  "; e + accent: e",
  "\u0301",
  "; jamo: \u1100",
  "\u1161",
  "; 日本語",
  "テキスト",
  " Ünïcödé ",
  "€ 𝄞 \u{10FFFF}",
  " last line without newline",
]

async function recordsTextExactly(client) {
  const id = randomUUID()
  const recorder = new Recorder(client, id)
  for (const chunk of LLM_CHUNKS) await recorder.record(chunk)
  const { answer, timedOut } = await recorder.complete()
  check(
    "withMemoryService: Record answered RECORD_STATUS_SUCCESS",
    answer?.status === "RECORD_STATUS_SUCCESS",
    timedOut ? `complete() timed out waiting for its ${timedOut}` : JSON.stringify(answer),
  )
  const result = await replay(client, id)
  const sent = LLM_CHUNKS.join("")
  check(
    "memoryServiceReplay: the content byte for byte",
    utf8Equal(result.text, sent),
    `got ${show(result.text)}, want ${show(sent)}`,
  )
  check("memoryServiceReplay: ends OK, tapedeck-status completed", ended(result, "completed"), describe(result))
}

async function replayStartedMidResponseFollowsItLive(client) {
  const id = randomUUID()
  const recorder = new Recorder(client, id)
  const before = LLM_CHUNKS.slice(0, 8)
  const after = LLM_CHUNKS.slice(8)
  for (const chunk of before) await recorder.record(chunk)
  const listed = await until(async () => (await resumeCheck(client, [id])).includes(id))
  check("memoryServiceResumeCheck: lists the live recording", listed, `${id} never listed`)
  const reader = follow(client, id)
  // Each later token reaches the live reader before the next is sent: it is pushed, not read
  // back once the response has ended.
  let sent = before.join("")
  let live = true
  for (const chunk of after) {
    await recorder.record(chunk)
    sent += chunk
    if (!(await until(() => reader.seen === sent)) || reader.endedAt !== null) live = false
  }
  const completing = Date.now()
  const { answer, timedOut } = await recorder.complete()
  check(
    "withMemoryService: Record answered RECORD_STATUS_SUCCESS with a live reader",
    answer?.status === "RECORD_STATUS_SUCCESS",
    timedOut ? `complete() timed out waiting for its ${timedOut}` : JSON.stringify(answer),
  )
  const result = await within(reader.ended, WAIT_MS)
  check(
    "memoryServiceReplay (started mid-response): every token live, exactly the whole content",
    result !== TIMED_OUT && live && utf8Equal(result.text, sent),
    result === TIMED_OUT ? "the replay did not end" : `live ${live}; got ${show(result.text)}, want ${show(sent)}`,
  )
  check(
    "memoryServiceReplay (started mid-response): ends OK after complete, tapedeck-status completed",
    result !== TIMED_OUT && ended(result, "completed") && reader.endedAt >= completing,
    result === TIMED_OUT ? "the replay did not end" : describe(result),
  )
  const still = await resumeCheck(client, [id])
  check("memoryServiceResumeCheck: no longer lists it once completed", still.length === 0, JSON.stringify(still))
}

async function cancelFromAnotherInstance(client) {
  // The app instance the user's stop request reached: a client of its own.
  const other = newClient()
  try {
    const id = randomUUID()
    const recorder = new Recorder(client, id)
    const before = LLM_CHUNKS.slice(0, 12)
    for (const chunk of before) await recorder.record(chunk)
    const beforeText = before.join("")
    // A write's callback means only that grpc-js sent it: a Replay must wait for the recording.
    await until(async () => (await resumeCheck(other, [id])).includes(id))
    const reader = follow(other, id)
    await until(() => reader.seen === beforeText)
    const response = await cancel(other, id)
    check(
      "memoryServiceCancel: accepted from another client",
      response.accepted === true && !response.redirect_address,
      JSON.stringify(response),
    )
    // The producer has not noticed yet: an LLM stream goes on yielding tokens.
    let sent = beforeText
    let writeFailure = null
    const writing = Date.now()
    for (let i = 0; i < 20; i++) {
      const chunk = ` late ${i} ✂️`
      sent += chunk
      try {
        if ((await within(recorder.record(chunk), COMPLETE_TIMEOUT_MS)) === TIMED_OUT) {
          writeFailure = `write ${i} after the cancel did not finish`
          break
        }
      } catch (error) {
        // The helpers' chain rejects then, and complete() would wait on it; noted, not failed.
        writeFailure ??= `write ${i} after the cancel failed: ${error.message}`
        break
      }
      await sleep(10)
    }
    const { answer, timedOut } = await recorder.complete()
    const took = Date.now() - writing
    check(
      "withMemoryService: Record answered RECORD_STATUS_CANCELLED, complete() done without its timeouts",
      answer?.status === "RECORD_STATUS_CANCELLED" && !timedOut,
      timedOut
        ? `complete() timed out waiting for its ${timedOut} (${writeFailure ?? "the late writes went through"})`
        : `${JSON.stringify(answer)} after ${took} ms`,
    )
    const live = await within(reader.ended, WAIT_MS)
    check(
      "memoryServiceReplay (live during the cancel): ends OK, tapedeck-status cancelled, all that was sent before",
      live !== TIMED_OUT && ended(live, "cancelled") && live.text.startsWith(beforeText) && sent.startsWith(live.text),
      live === TIMED_OUT ? "the replay did not end" : describe(live),
    )
    const result = await replay(client, id)
    check(
      "memoryServiceReplay (after the cancel): ends OK, tapedeck-status cancelled, a prefix of what was sent",
      ended(result, "cancelled") && result.text.startsWith(beforeText) && sent.startsWith(result.text),
      describe(result),
    )
  } finally {
    other.close()
  }
}

async function producerCancelledWithoutComplete(client) {
  const id = randomUUID()
  const recorder = new Recorder(client, id)
  const chunks = LLM_CHUNKS.slice(0, 20)
  for (const chunk of chunks) await recorder.record(chunk)
  const sent = chunks.join("")
  await until(async () => (await resumeCheck(client, [id])).includes(id))
  const reader = follow(client, id)
  // Everything sent is committed once a reader has it.
  await until(() => reader.seen === sent)
  // What the helpers do when complete()'s waits time out.
  recorder.call.cancel()
  const outcome = await within(
    recorder.answer.then(
      (answer) => `answered ${JSON.stringify(answer)}`,
      (error) => error.code,
    ),
    WAIT_MS,
  )
  check(
    "withMemoryService call.cancel(): the Record call ends CANCELLED on the client",
    outcome === grpc.status.CANCELLED,
    String(outcome),
  )
  // Right after the cancel, well within --producer-grace: detached, still live.
  const listed = await resumeCheck(client, [id])
  check(
    "memoryServiceResumeCheck: still lists it, detached, within the producer grace",
    listed.includes(id) && reader.endedAt === null,
    `listed ${JSON.stringify(listed)}, reader ended: ${reader.endedAt !== null}`,
  )
  const live = await within(reader.ended, WAIT_MS)
  check(
    "memoryServiceReplay (live during the cancel): not completed; ends OK, tapedeck-status interrupted, all that was sent",
    live !== TIMED_OUT && ended(live, "interrupted") && utf8Equal(live.text, sent),
    live === TIMED_OUT ? "the replay did not end" : describe(live),
  )
  const result = await replay(client, id)
  check(
    "memoryServiceReplay (after the grace): not completed; ends OK, tapedeck-status interrupted, all that was sent",
    ended(result, "interrupted") && utf8Equal(result.text, sent),
    describe(result),
  )
  const after = await resumeCheck(client, [id])
  check("memoryServiceResumeCheck: no longer lists it once interrupted", after.length === 0, JSON.stringify(after))
}

async function unknownConversation(client) {
  const id = randomUUID()
  const result = await replay(client, id)
  check("memoryServiceReplay (unknown conversation): ends with status OK", result.code === grpc.status.OK, describe(result))
  check("memoryServiceReplay (unknown conversation): no content", result.messages === 0, describe(result))
  check(
    "memoryServiceReplay (unknown conversation): trailer tapedeck-reason unknown",
    result.reason === "unknown",
    `tapedeck-reason ${result.reason}; ${describe(result)}`,
  )
  const response = await cancel(client, id)
  check(
    "memoryServiceCancel (unknown conversation): not accepted",
    response.accepted === false && !response.redirect_address,
    JSON.stringify(response),
  )
  const listed = await resumeCheck(client, [id])
  check("memoryServiceResumeCheck (unknown conversation): not listed", listed.length === 0, JSON.stringify(listed))
}

async function manyRecordersOnOneClient(client) {
  const COUNT = 500
  const ids = Array.from({ length: COUNT }, () => randomUUID())
  const contents = ids.map((_, i) => [`Response ${i}:`, " 🦀", ` ${"token ".repeat(i % 7)}`, "\n👩", "\u200d💻 done"])
  const recorders = ids.map((id) => new Recorder(client, id))
  // Every recording live at once before any completes.
  await Promise.all(recorders.map((recorder, i) => recorder.record(contents[i][0]).then(() => recorder.record(contents[i][1]))))
  let listed = []
  const allListed = await until(async () => (listed = await resumeCheck(client, ids)).length === COUNT)
  check(
    `memoryServiceResumeCheck: ${COUNT} live recordings on one client listed, in request order`,
    allListed && listed.every((id, i) => id === ids[i]),
    `${listed.length} listed`,
  )
  const endings = await Promise.all(
    recorders.map(async (recorder, i) => {
      for (const chunk of contents[i].slice(2)) await recorder.record(chunk)
      return recorder.complete()
    }),
  )
  const notSuccess = endings
    .map((ending, i) => ({ i, ending }))
    .filter(({ ending }) => ending.answer?.status !== "RECORD_STATUS_SUCCESS")
  check(
    `withMemoryService: ${COUNT} concurrent Record calls on one client all RECORD_STATUS_SUCCESS`,
    notSuccess.length === 0,
    `${notSuccess.length} not: ${JSON.stringify(notSuccess.slice(0, 3))}`,
  )
  const results = await Promise.all(ids.map((id) => replay(client, id)))
  const wrong = results
    .map((result, i) => ({ i, result }))
    .filter(({ result, i }) => !ended(result, "completed") || !utf8Equal(result.text, contents[i].join("")))
  check(
    `memoryServiceReplay: all ${COUNT} byte for byte, ending OK with tapedeck-status completed`,
    wrong.length === 0,
    `${wrong.length} wrong, e.g. ${wrong.slice(0, 3).map(({ i, result }) => `#${i}: ${describe(result)}`).join("; ")}`,
  )
  const still = await resumeCheck(client, ids)
  check(`memoryServiceResumeCheck: none of the ${COUNT} listed once completed`, still.length === 0, `${still.length} listed`)
}

const cases = [
  ["record", recordsTextExactly],
  ["live replay", replayStartedMidResponseFollowsItLive],
  ["cancel from another client", cancelFromAnotherInstance],
  ["call.cancel() without complete", producerCancelledWithoutComplete],
  ["unknown conversation", unknownConversation],
  ["500 recorders on one client", manyRecordersOnOneClient],
]

const runTimer = setTimeout(() => {
  console.log(JSON.stringify({ ok: false, check: "the run", detail: `still running after ${RUN_TIMEOUT_MS} ms` }))
  process.exit(1)
}, RUN_TIMEOUT_MS)
const client = newClient()
for (const [name, run] of cases) {
  try {
    await run(client)
  } catch (error) {
    check(`${name}: ran to the end`, false, error?.stack ?? String(error))
  }
}
client.close()
clearTimeout(runTimer)
process.exit(failed === 0 ? 0 : 1)
