// Drives headless Chromium for tests/clients/browser.rs: serves a page that resumes stream STREAM_URL
// from SAVED_OFFSET with the browser's own EventSource (the three lines docs/http.md shows), in
// three readers at once (as three tabs of the app would), prints "connected" once each has its
// first control event, then prints what each received, every control event as the browser
// parsed it (its id and its data), and the `Stream-Next-Offset` a cross-origin fetch of the
// stream could read, plainly and after a preflight, as JSON, once the stream has closed.
import { createServer } from "node:http"
import { chromium } from "playwright-core"

const [streamUrl, savedOffset] = process.argv.slice(2)
const executablePath = process.env.TAPEDECK_TEST_CHROMIUM ?? "/usr/bin/chromium"

const page = `<!doctype html>
<meta charset="utf-8">
<pre id="out"></pre>
<script>
  window.readers = [0, 1, 2].map(() => {
    const reader = { received: "", controls: [], connected: false, done: false }
    const es = new EventSource(${JSON.stringify(`${streamUrl}?offset=${savedOffset}&live=sse`)})
    es.addEventListener("data", (e) => { out.textContent += e.data; reader.received += e.data })
    es.addEventListener("control", (e) => {
      const data = JSON.parse(e.data)
      reader.controls.push({ id: e.lastEventId, data })
      reader.connected = true
      if (data.streamClosed) { es.close(); reader.done = true }
    })
    return reader
  })
  // A catch-up read by fetch, as the protocol's client makes it: the page can read the
  // offset header only if the server exposes it to this origin.
  window.readOffset = async () => (await fetch(${JSON.stringify(`${streamUrl}?offset=-1`)})).headers.get("stream-next-offset")
  // The same read with a header that is not a simple one (an app revalidating its copy): the
  // browser asks first (a preflight), and sends it only if the server allows that header.
  window.readOffsetPreflighted = async () => (await fetch(${JSON.stringify(`${streamUrl}?offset=-1`)}, { headers: { "if-none-match": '"an-older-copy"' } })).headers.get("stream-next-offset")
</script>`

// The page comes from another origin than the stream, as an app's page would: CORS applies.
const server = createServer((_, res) => {
  res.writeHead(200, { "content-type": "text/html; charset=utf-8" })
  res.end(page)
})
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve))
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] })
try {
  const tab = await browser.newPage()
  await tab.goto(`http://127.0.0.1:${server.address().port}/`)
  await tab.waitForFunction(() => window.readers.every((r) => r.connected), null, { timeout: 20000 })
  console.log("connected")
  await tab.waitForFunction(() => window.readers.every((r) => r.done), null, { timeout: 20000 })
  const readers = await tab.evaluate(() => window.readers)
  const nextOffset = await tab.evaluate(() => window.readOffset())
  const preflightedOffset = await tab.evaluate(() => window.readOffsetPreflighted())
  console.log(JSON.stringify({ readers, nextOffset, preflightedOffset }))
} finally {
  await browser.close()
  server.close()
}
