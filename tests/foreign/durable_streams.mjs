// Drives tapedeck's HTTP face with clients written by others, for tests/clients/foreign_durable_streams.rs:
// the Durable Streams project's own TypeScript client (@durable-streams/client) writes
// realistic LLM output and reads it back live over SSE, live by long-poll and as catch-up, and
// the browser's own EventSource (headless Chromium, Debian's `chromium`) reads it live and as
// catch-up. Everything read must equal what was written, byte for byte, except where SSE
// itself cannot carry a byte: SSE splits text at CR, LF and CRLF and joins the lines with LF,
// so a CR arrives as LF over SSE (catch-up and long-poll carry it as it was).
//
// Usage: node durable_streams.mjs BASE_URL [BASE_URL ...]   (http://HOST:PORT of an HTTP face)
// The first face takes the writes; the readers are spread over the others (given several nodes
// of a cluster, a follower writes and the other nodes read), or all use the first.
// Prints one JSON line per check; exits 1 if any check failed.
import { createServer } from "node:http"
import { DurableStream, stream } from "@durable-streams/client"
import { chromium } from "playwright-core"

const bases = process.argv.slice(2)
const base = bases[0]
// The face reader `i` uses.
const readBase = (i) => bases[i % bases.length]
const chromiumPath = process.env.TAPEDECK_TEST_CHROMIUM ?? "/usr/bin/chromium"
const encoder = new TextEncoder()
const WAIT_MS = 20000

const bytes = (text) => encoder.encode(text)
const crab = bytes("🦀")
const thumb = bytes("👍🏽")
const accent = bytes("é")

// (The npm client reads what is already there with a plain GET even in SSE mode, so only the
// browser reads a closed stream over SSE.)
//
// Each case: the stream's content type and its appends, in order; the last closes the stream.
// A string is appended as UTF-8 text, an array of numbers as raw bytes, an object as JSON.
const cases = [
  {
    name: "llm-tokens",
    contentType: "text/plain",
    appends: ["Hello,", " world", "!", " How", " are", " you", "?", "  Two", " spaces", "   ", "trailing ", " ", "end", "  two"],
  },
  {
    name: "line-breaks",
    contentType: "text/plain; charset=utf-8",
    appends: ["first\n", "\n", "second\r\n", "\r\n", "lone\rcarriage", "\r", "\n", " after", "\nlead", "trail\r", "\r\n\r\n", " last\n"],
  },
  {
    name: "sse-lookalikes",
    contentType: "text/plain",
    appends: [": not a comment", "\n:also not", "\ndata: not a field", "\nevent: control\ndata: {}", "\n\nid: 7\nretry: 1\n", ":", "data:", " x"],
  },
  {
    name: "split-characters",
    contentType: "text/markdown",
    appends: [
      "crab ",
      [crab[0]],
      [crab[1], crab[2]],
      [crab[3], 0x20],
      [...thumb.slice(0, 5)],
      [...thumb.slice(5), accent[0]],
      [accent[1]],
      " done ",
      [...crab.slice(0, 3)],
      [crab[3]],
    ],
  },
  {
    name: "json-messages",
    contentType: "application/json",
    appends: [
      { role: "assistant", delta: " Hello" },
      { delta: "line\nbreak", n: 1 },
      { delta: "crlf\r\nand lone\r", emoji: "🦀" },
      { delta: ": colon", data: "data: x" },
      [1, " two", { three: "  3" }],
      " a bare string ",
    ],
  },
  {
    // Appends of 16 KiB or more go out whole, as the server stores them (small ones are joined),
    // and the second catch-up reads them from the server's memory.
    name: "large-chunks",
    contentType: "text/plain",
    appends: ["🦀".repeat(5000), " small", " tokens ", "é\nline ".repeat(4000), "b".repeat(40000), " end"],
  },
  {
    name: "base64-bytes",
    contentType: "application/octet-stream",
    appends: [[0, 1, 2, 13, 10, 255], [13], [10, 32, 58], [...crab.slice(0, 2)], [...crab.slice(2), 0, 0]],
  },
]

const isJson = (c) => c.contentType.startsWith("application/json")
const body = (c, append) => {
  if (isJson(c)) return JSON.stringify(append)
  if (typeof append === "string") return append
  return new Uint8Array(append)
}
const concat = (chunks) => {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0))
  let at = 0
  for (const c of chunks) {
    out.set(c, at)
    at += c.length
  }
  return out
}
const written = (c) => concat(c.appends.map((a) => (typeof a === "string" ? bytes(a) : new Uint8Array(a))))
// What SSE can carry of text: every CR, CRLF and LF arrives as LF.
const overSse = (text) => text.replace(/\r\n?/g, "\n")
const hex = (b) => Buffer.from(b).toString("hex")

let failed = 0
function check(name, what, got, want) {
  const ok = JSON.stringify(got) === JSON.stringify(want)
  if (!ok) failed += 1
  console.log(JSON.stringify(ok ? { ok, case: name, check: what } : { ok, case: name, check: what, got, want }))
}

// What a reader of case `c` must end with, as the check compares it.
function expected(c, viaSse) {
  if (isJson(c)) return c.appends
  const all = written(c)
  if (c.contentType.startsWith("text/")) {
    const text = new TextDecoder().decode(all)
    return viaSse ? overSse(text) : text
  }
  return hex(all)
}

// Reads a whole stream with the npm client in `live` mode until it is closed.
async function readWithClient(url, c, live) {
  const res = await stream({ url, offset: "-1", live })
  const chunks = []
  const items = []
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${live} reader timed out`)), WAIT_MS)
    const finish = (chunk) => {
      if (chunk.streamClosed) {
        clearTimeout(timer)
        resolve()
      }
    }
    if (isJson(c)) {
      res.subscribeJson((batch) => {
        items.push(...batch.items)
        finish(batch)
      })
    } else {
      res.subscribeBytes((chunk) => {
        chunks.push(chunk.data)
        finish(chunk)
      })
    }
  })
  return {
    connected: res,
    result: done.then(() => {
      if (isJson(c)) return items
      const all = concat(chunks)
      return c.contentType.startsWith("text/") ? new TextDecoder().decode(all) : hex(all)
    }),
  }
}

// A page on another origin that reads a stream with the browser's EventSource, as an app would.
const page = `<!doctype html>
<meta charset="utf-8">
<script>
  window.read = (url, mode) => new Promise((resolve, reject) => {
    const es = new EventSource(url + "?offset=-1&live=sse")
    const parts = []
    es.addEventListener("data", (e) => parts.push(e.data))
    es.addEventListener("control", (e) => {
      window.connected = true
      if (!JSON.parse(e.data).streamClosed) return
      es.close()
      if (mode === "json") resolve(parts.flatMap((p) => JSON.parse(p)))
      else if (mode === "base64") resolve(parts.map((p) => Array.from(atob(p), (ch) => ch.charCodeAt(0).toString(16).padStart(2, "0")).join("")).join(""))
      else resolve(parts.join(""))
    })
    es.onerror = () => { if (es.readyState === EventSource.CLOSED) reject(new Error("EventSource closed")) }
  })
</script>`
const pages = createServer((_, res) => {
  res.writeHead(200, { "content-type": "text/html; charset=utf-8" })
  res.end(page)
})
await new Promise((resolve) => pages.listen(0, "127.0.0.1", resolve))
const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] })

try {
  for (const c of cases) {
    const path = `/v1/stream/foreign-${c.name}-${process.pid}`
    const url = `${base}${path}`
    const [sseUrl, longPollUrl] = [readBase(1) + path, readBase(2) + path]
    const mode = isJson(c) ? "json" : c.contentType.startsWith("text/") ? "text" : "base64"
    const handle = await DurableStream.create({ url, contentType: c.contentType })

    // Live readers, connected before the first append.
    const sse = await readWithClient(sseUrl, c, "sse")
    const longPoll = await readWithClient(longPollUrl, c, "long-poll")
    const tab = await browser.newPage()
    await tab.goto(`http://127.0.0.1:${pages.address().port}/`)
    const liveInBrowser = tab.evaluate(([u, m]) => window.read(u, m), [sseUrl, mode])
    await tab.waitForFunction(() => window.connected, null, { timeout: WAIT_MS })

    for (const append of c.appends.slice(0, -1)) await handle.append(body(c, append))
    // An empty append is refused with 400 Bad Request and changes nothing (the later checks
    // read every byte): the server's answer, not any failure of the client.
    let emptyAnswer = "accepted"
    try {
      await handle.append("")
    } catch (err) {
      emptyAnswer = err?.status ?? `no status: ${err}`
    }
    check(c.name, "an empty append is refused with 400", emptyAnswer, 400)
    await handle.close({ body: body(c, c.appends.at(-1)) })

    check(c.name, "npm client, live SSE", await sse.result, expected(c, true))
    check(c.name, "npm client, live long-poll", await longPoll.result, expected(c, false))
    check(c.name, "EventSource, live", await liveInBrowser, expected(c, true))

    // Catch-up, once the stream is closed.
    const catchUp = await readWithClient(longPollUrl, c, false)
    check(c.name, "npm client, catch-up", await catchUp.result, expected(c, false))
    const catchUpInBrowser = await tab.evaluate(([u, m]) => window.read(u, m), [sseUrl, mode])
    check(c.name, "EventSource, catch-up", catchUpInBrowser, expected(c, true))
    await tab.close()
  }

  // An SSE event holds at most 256 KiB. One that comes out exactly full, with nothing more
  // committed, is followed at once by a control event saying the reader is up to date (not
  // only when more data comes): for the npm client live, and for EventSource catching up.
  {
    const name = "full-event"
    const path = `/v1/stream/foreign-${name}-${process.pid}`
    const full = "f".repeat(256 * 1024)
    const handle = await DurableStream.create({ url: `${base}${path}`, contentType: "text/plain" })
    const live = await stream({ url: readBase(1) + path, offset: "-1", live: "sse" })
    let read = 0
    const upToDate = new Promise((resolve) => {
      const timer = setTimeout(() => resolve(`not up to date after ${read} bytes`), WAIT_MS)
      live.subscribeBytes((chunk) => {
        read += chunk.data.length
        if (chunk.upToDate && read === full.length) {
          clearTimeout(timer)
          resolve("up to date")
        }
      })
    })
    await handle.append(full)
    check(name, "npm client, live SSE", await upToDate, "up to date")
    const tab = await browser.newPage()
    await tab.goto(`http://127.0.0.1:${pages.address().port}/`)
    const caughtUp = await tab.evaluate(
      ([u, wait]) =>
        new Promise((resolve) => {
          const es = new EventSource(u + "?offset=-1&live=sse")
          let n = 0
          const done = (what) => {
            es.close()
            resolve(what)
          }
          const timer = setTimeout(() => done(`not up to date after ${n} bytes`), wait)
          es.addEventListener("data", (e) => (n += e.data.length))
          es.addEventListener("control", (e) => {
            if (JSON.parse(e.data).upToDate && n === 256 * 1024) {
              clearTimeout(timer)
              done("up to date")
            }
          })
        }),
      [readBase(2) + path, WAIT_MS],
    )
    check(name, "EventSource, catch-up", caughtUp, "up to date")
    await tab.close()
    live.cancel()
    await handle.close()
  }

  // Text longer than a response's room, read live by long-poll until the stream closes: the
  // npm client decodes each response's text on its own, so every response must end with whole
  // characters (the room's end falls inside a "€" here).
  {
    const name = "long-text"
    const path = `/v1/stream/foreign-${name}-${process.pid}`
    const euros = "€".repeat(349525)
    const handle = await DurableStream.create({ url: `${base}${path}`, contentType: "text/plain; charset=utf-8" })
    await handle.append("a")
    for (let i = 0; i < 9; i++) await handle.append(euros)
    await handle.close()
    const reader = await stream({ url: readBase(1) + path, offset: "-1", live: "long-poll" })
    const parts = []
    const text = await new Promise((resolve) => {
      const timer = setTimeout(() => resolve(parts.join("")), WAIT_MS)
      reader.subscribeText((chunk) => {
        parts.push(chunk.text)
        if (chunk.streamClosed) {
          clearTimeout(timer)
          resolve(parts.join(""))
        }
      })
    })
    const want = "a" + euros.repeat(9)
    let at = 0
    while (at < want.length && text[at] === want[at]) at++
    const got = at === want.length && text.length === want.length
      ? "the text written"
      : `${text.length} characters, differing at ${at}: ${JSON.stringify(text.slice(at - 2, at + 3))}`
    check(name, "npm client, long-poll text", got, "the text written")
  }
} finally {
  await browser.close()
  pages.close()
}
process.exit(failed === 0 ? 0 : 1)
