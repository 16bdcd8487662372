// tapedeck's console. Plain script, no library. Every text a producer sent (ids, content, end
// messages) goes into the page as text (textContent), never as markup. The credential lives in
// this tab's sessionStorage and travels only in headers: live reads use fetch, not
// EventSource, so that no credential ever goes into a URL.
"use strict"

const API = "/console/api"
// Where the HTTP face serves streams (`--http-path-prefix`), as the server wrote it here.
const STREAMS = document.querySelector('meta[name="tapedeck-stream-prefix"]').content
const CREDENTIAL = "tapedeck.console.credential"
const STATUSES = ["recording", "completed", "cancelled", "interrupted", "failed", "deleted"]

// ---- calls -------------------------------------------------------------------------------

// Sent with the console's reads of content: it watches, and does not count among a
// recording's readers.
const OBSERVING = { "tapedeck-observer": "1" }

function credential() {
  try { return JSON.parse(sessionStorage.getItem(CREDENTIAL)) } catch { return null }
}

function authHeaders() {
  const cred = credential()
  if (!cred) return {}
  return cred.kind === "key" ? { "x-api-key": cred.value } : { Authorization: `Bearer ${cred.value}` }
}

/** fetch with the tab's credential; a 401 asks for one. */
async function call(url, options = {}) {
  const response = await fetch(url, { ...options, headers: { ...authHeaders(), ...(options.headers ?? {}) } })
  // Read from a copy: the caller reads the body too.
  if (response.status === 401) askCredential(await response.clone().text())
  return response
}

/** The error of a refused call; a 401's has asked for a credential already, and is not shown. */
async function refusal(response) {
  const err = new Error(`${response.status}: ${(await response.text()).trim()}`)
  err.unauthorized = response.status === 401
  return err
}

async function json(url, options) {
  const response = await call(url, options)
  if (!response.ok) throw await refusal(response)
  return response.json()
}

/** Reads an SSE response with fetch (so headers carry the credential); calls onEvent(name, data). */
async function followEvents(url, onEvent, signal, headers = {}) {
  const response = await call(url, { signal, headers })
  if (!response.ok) throw await refusal(response)
  const encoding = response.headers.get("stream-sse-data-encoding")
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ""
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buffer += value
    let end
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      let name = "message"
      const data = []
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue
        const colon = line.indexOf(":")
        const field = colon < 0 ? line : line.slice(0, colon)
        let text = colon < 0 ? "" : line.slice(colon + 1)
        if (text.startsWith(" ")) text = text.slice(1)
        if (field === "event") name = text
        else if (field === "data") data.push(text)
      }
      onEvent(name, data.join("\n"), encoding)
    }
  }
}

// ---- the page ----------------------------------------------------------------------------

const $ = (id) => document.getElementById(id)

/** An element with text; never markup. */
function el(tag, text, className) {
  const node = document.createElement(tag)
  if (text !== undefined && text !== null) node.textContent = String(text)
  if (className) node.className = className
  return node
}

function showError(message) {
  $("error").hidden = !message
  $("error").textContent = message ?? ""
}

function askCredential(reason) {
  $("sign-in").hidden = false
  $("sign-in-reason").textContent = reason.trim()
}

function showWho() {
  const cred = credential()
  $("who").textContent = cred ? `with ${cred.kind === "key" ? "an API key" : "a grant"}` : ""
  $("sign-out").hidden = !cred
}

$("cred-use").addEventListener("click", () => {
  const value = $("cred-value").value.trim()
  if (!value) return
  sessionStorage.setItem(CREDENTIAL, JSON.stringify({ kind: $("cred-kind").value, value }))
  $("cred-value").value = ""
  $("sign-in").hidden = true
  showWho()
  route()
})

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(CREDENTIAL)
  showWho()
  route()
})

function age(ms) {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000))
  if (seconds < 120) return `${seconds} s`
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h`
  return `${Math.round(seconds / 86400)} d`
}

function bytes(n) {
  if (n < 1024) return `${n} B`
  if (n < 1048576) return `${(n / 1024).toFixed(1)} KiB`
  if (n < 1073741824) return `${(n / 1048576).toFixed(1)} MiB`
  return `${(n / 1073741824).toFixed(2)} GiB`
}

function statusBadge(status) {
  return el("span", status, `status status-${STATUSES.includes(status) ? status : "other"}`)
}

function recordingLink(id) {
  const link = el("a", id)
  link.href = `#/recordings/${encodeURIComponent(id)}`
  return link
}

/** A stream path as a URL path: each segment encoded, the slashes kept. */
function streamPath(id) {
  return id.split("/").map(encodeURIComponent).join("/")
}

// Whatever the current view follows is stopped when the view changes.
let leaving = new AbortController()

function route() {
  leaving.abort()
  leaving = new AbortController()
  showError(null)
  const hash = location.hash.slice(1) || "/"
  const view = $("view")
  view.replaceChildren()
  if (hash.startsWith("/recordings/")) {
    showRecording(view, decodeURIComponent(hash.slice("/recordings/".length)), leaving.signal)
  } else if (hash === "/overview") {
    showOverview(view, leaving.signal)
  } else {
    showList(view, leaving.signal)
  }
}

window.addEventListener("hashchange", route)

// ---- recordings --------------------------------------------------------------------------

const listState = { status: "", prefix: "", tokens: [""] }

function showList(view, signal) {
  const controls = el("div", undefined, "controls")
  const status = el("select")
  for (const name of ["", ...STATUSES]) {
    const option = el("option", name || "every status")
    option.value = name
    status.append(option)
  }
  status.value = listState.status
  const prefix = el("input")
  prefix.placeholder = "id starts with…"
  prefix.value = listState.prefix
  const first = el("button", "First page")
  const next = el("button", "Next page")
  const where = el("span", undefined, "muted")
  controls.append(el("label", "Status "), status, prefix, first, next, where)
  const live = el("section")
  const all = el("section")
  view.append(controls, live, all)

  let nextToken = null
  let pending = null
  const refresh = () => {
    // Events that come together fetch once.
    if (pending) return
    pending = setTimeout(async () => {
      pending = null
      try {
        nextToken = await renderList(live, all)
        next.disabled = !nextToken
        where.textContent = `page ${listState.tokens.length}`
      } catch (err) {
        if (!signal.aborted && !err.unauthorized) showError(String(err.message ?? err))
      }
    }, 50)
  }
  status.addEventListener("change", () => { listState.status = status.value; listState.tokens = [""]; refresh() })
  prefix.addEventListener("input", () => { listState.prefix = prefix.value; refresh() })
  first.addEventListener("click", () => { listState.tokens = [""]; refresh() })
  next.addEventListener("click", () => { if (nextToken) { listState.tokens.push(nextToken); refresh() } })
  // The list follows the server's changes: fetched again when recordings start, end or grow.
  followEvents(`${API}/changes`, () => refresh(), signal).catch((err) => {
    if (!signal.aborted && !err.unauthorized) showError(`live updates stopped: ${err.message ?? err}`)
  })
}

async function page(status, token) {
  const query = new URLSearchParams({ status, prefix: listState.prefix, page_token: token })
  return json(`${API}/recordings?${query}`)
}

/** Live recordings first (when no status is chosen), then the chosen page; the next token. */
async function renderList(live, all) {
  const token = listState.tokens[listState.tokens.length - 1]
  const chosen = await page(listState.status, token)
  const liveRows = listState.status === "" ? (await page("recording", "")).recordings : []
  const liveIds = new Set(liveRows.map((row) => row.id))
  live.replaceChildren()
  if (liveRows.length) live.append(el("h2", `Live (${liveRows.length})`), table(liveRows))
  const rest = chosen.recordings.filter((row) => !liveIds.has(row.id))
  all.replaceChildren(el("h2", listState.status ? `Status ${listState.status}` : "All recordings"))
  all.append(rest.length ? table(rest) : el("p", "Nothing here.", "muted"))
  if (chosen.unanswered_instances?.length) {
    all.append(el("p", `Not answering: ${chosen.unanswered_instances.join(", ")}`, "muted"))
  }
  return chosen.next_page_token
}

function table(rows) {
  const table = el("table")
  const head = el("tr")
  for (const name of ["id", "status", "age", "producer", "readers", "bytes", "chunks", "stream", "where"]) {
    head.append(el("th", name))
  }
  table.append(head)
  for (const row of rows) {
    const tr = el("tr")
    tr.dataset.id = row.id
    const id = el("td")
    id.append(recordingLink(row.id))
    const status = el("td")
    status.append(statusBadge(row.status))
    const producer = row.status === "recording" ? (row.producer_attached ? "attached" : "detached") : "—"
    const stream = row.content_type
      ? [row.content_type, ...(row.producers ?? []).map((p) => `${p.id} epoch ${p.epoch} seq ${p.seq}`)].join("; ")
      : "gRPC"
    const where = row.owner ? `${row.location} on ${row.owner}` : row.location
    tr.append(id, status, el("td", age(row.created_ms)), el("td", producer),
      el("td", row.readers, "num"), el("td", bytes(row.bytes), "num"), el("td", row.chunks, "num"),
      el("td", stream), el("td", where))
    table.append(tr)
  }
  return table
}

// ---- one recording -----------------------------------------------------------------------

async function showRecording(view, id, signal) {
  const back = el("a", "← recordings")
  back.href = "#/"
  const title = el("h2", id)
  const meta = el("dl", undefined, "meta")
  const actions = el("div", undefined, "controls")
  const offsets = el("div", undefined, "controls")
  const content = el("pre", undefined, "content")
  content.id = "content"
  view.append(back, title, meta, actions, offsets, content)

  let found
  try {
    found = await json(`${API}/recordings/${streamPath(id)}`)
  } catch (err) {
    if (!err.unauthorized) showError(String(err.message ?? err))
    return
  }
  if (found.tombstone) {
    const stone = found.tombstone
    title.append(" ", el("span", `tombstone: ${stone.gone}`, "status tombstone"))
    describe(meta, [["ended as", stone.status], ["started", new Date(stone.created_ms).toISOString()],
      ["went", new Date(stone.collected_ms).toISOString()]])
    content.textContent = "Its content is gone."
    return
  }
  const row = found.recording
  const state = { row, offset: "-1" }
  const render = () => {
    describe(meta, [["status", state.row.status], ["started", new Date(state.row.created_ms).toISOString()],
      ["ended", state.row.finished_ms ? new Date(state.row.finished_ms).toISOString() : "—"],
      ["end message", state.row.end_message ?? "—"], ["bytes", state.row.bytes], ["chunks", state.row.chunks],
      ["readers", state.row.readers], ["content type", state.row.content_type ?? "text/plain (gRPC)"],
      ["where", state.row.owner ? `${state.row.location} on ${state.row.owner}` : state.row.location]])
    stop.hidden = state.row.status !== "recording"
  }
  const stop = el("button", "Stop")
  stop.id = "stop"
  const remove = el("button", "Delete")
  remove.id = "delete"
  actions.append(stop, remove)
  render()

  const at = el("span", undefined, "muted")
  const from = el("input")
  from.placeholder = "replay from offset (-1: start)"
  const replay = el("button", "Replay from offset")
  offsets.append(el("span", "next offset:"), at, from, replay)

  let reading = new AbortController()
  let refreshing = null
  signal.addEventListener("abort", () => { reading.abort(); clearTimeout(refreshing) })
  // Follows the content from `offset`; `fresh` starts the shown content again. The server
  // ends an SSE response after a minute: the read goes on from where it got to.
  const follow = (offset, fresh = true) => {
    reading.abort()
    const mine = (reading = new AbortController())
    if (fresh) content.replaceChildren()
    let next = offset
    const url = `${STREAMS}/${streamPath(id)}?offset=${encodeURIComponent(offset)}&live=sse`
    followEvents(url, (name, data, encoding) => {
      if (name === "data") {
        // Kept at its end while new content comes, unless the reader scrolled up.
        const atEnd = content.scrollHeight - content.scrollTop - content.clientHeight < 8
        content.append(shown(data, encoding, state.row.content_type))
        if (atEnd) content.scrollTop = content.scrollHeight
      }
      if (name === "control") {
        const control = JSON.parse(data)
        next = control.streamNextOffset
        at.textContent = next
        if (control.streamClosed) {
          mine.abort()
          refreshRow()
        } else if (!refreshing) {
          // Its length and readers, at most once a second while tokens come.
          refreshing = setTimeout(() => { refreshing = null; refreshRow() }, 1000)
        }
      }
    }, mine.signal, OBSERVING).then(() => {
      if (!mine.signal.aborted) follow(next, false)
    }).catch((err) => {
      if (!mine.signal.aborted && !err.unauthorized) showError(`reading stopped: ${err.message ?? err}`)
    })
  }
  const refreshRow = async () => {
    try {
      const again = await json(`${API}/recordings/${streamPath(id)}`)
      if (again.recording) { state.row = again.recording; render() }
      if (again.tombstone) route()
    } catch (err) {
      if (!signal.aborted && !err.unauthorized) showError(String(err.message ?? err))
    }
  }
  replay.addEventListener("click", () => follow(from.value.trim() || "-1"))
  stop.addEventListener("click", async () => {
    if (!confirm(`Stop the response being recorded at ${id}?`)) return
    const response = await call(`/v1/stop/${streamPath(id)}`, { method: "POST" })
    const text = await response.text()
    showError(response.ok ? null : `stop: ${response.status} ${text.trim()}`)
    refreshRow()
  })
  remove.addEventListener("click", async () => {
    if (!confirm(`Delete ${id} and everything recorded in it?`)) return
    const response = await call(`${API}/recordings/${streamPath(id)}`, { method: "DELETE" })
    if (!response.ok) showError(`delete: ${response.status} ${(await response.text()).trim()}`)
    else route()
  })
  follow("-1")
}

function describe(list, pairs) {
  list.replaceChildren()
  for (const [name, value] of pairs) list.append(el("dt", name), el("dd", value))
}

/** A data event as the page shows it: text as text, JSON one message per line, bytes as hex. */
function shown(data, encoding, contentType) {
  if (encoding === "base64") {
    const raw = atob(data)
    const hex = Array.from(raw, (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ")
    return document.createTextNode(`${hex} `)
  }
  if ((contentType ?? "").toLowerCase().startsWith("application/json")) {
    try {
      return document.createTextNode(JSON.parse(data).map((m) => `${JSON.stringify(m)}\n`).join(""))
    } catch { /* shown as text */ }
  }
  return document.createTextNode(data)
}

// ---- overview ----------------------------------------------------------------------------

/** Prometheus text: each sample's value by name and labels, e.g. `name{a="b"}`. */
function parseMetrics(text) {
  const samples = new Map()
  for (const line of (text ?? "").split("\n")) {
    if (!line || line.startsWith("#")) continue
    const space = line.lastIndexOf(" ")
    samples.set(line.slice(0, space), Number(line.slice(space + 1)))
  }
  return samples
}

// Each node the leader reports on, in id order: its lag and its health, from the samples
// `tapedeck_cluster_node_lag{node="3"}` and `tapedeck_cluster_node_healthy{node="3"}`.
function clusterNodes(samples) {
  const nodes = new Map()
  for (const [key, value] of samples) {
    const found = /^tapedeck_cluster_node_(lag|healthy)\{node="(\d+)"\}$/.exec(key)
    if (!found) continue
    const node = nodes.get(found[2]) ?? { id: Number(found[2]), lag: 0, healthy: undefined }
    if (found[1] === "lag") node.lag = value
    else node.healthy = value === 1
    nodes.set(found[2], node)
  }
  return [...nodes.values()].sort((a, b) => a.id - b.id)
}

function sum(samples, name) {
  let total = 0
  for (const [key, value] of samples) if (key === name || key.startsWith(`${name}{`)) total += value
  return total
}

const history = []

async function showOverview(view, signal) {
  const cards = el("div", undefined, "cards")
  const chart = document.createElementNS("http://www.w3.org/2000/svg", "svg")
  chart.setAttribute("class", "chart")
  chart.setAttribute("width", String(CHART.width))
  chart.setAttribute("height", String(CHART.height))
  const legend = el("p")
  legend.append(el("span", "tokens/s (left axis)", "legend-tokens"), " and ",
    el("span", "bytes/s (right axis)", "legend-bytes"), ", the last 5 minutes this page has seen")
  const instances = el("section")
  view.append(cards, el("h2", "Throughput"), legend, chart, instances)
  const tick = async () => {
    let overview
    try {
      overview = await json(`${API}/overview`)
    } catch (err) {
      if (!err.unauthorized) showError(String(err.message ?? err))
      return
    }
    const samples = parseMetrics(overview.metrics)
    history.push({ at: Date.now(), tokens: sum(samples, "tapedeck_appended_tokens_total"),
      bytes: sum(samples, "tapedeck_appended_bytes_total"),
      fsyncSum: sum(samples, "tapedeck_commit_fsync_seconds_sum"),
      fsyncCount: sum(samples, "tapedeck_commit_fsync_seconds_count") })
    while (history.length > 151) history.shift()
    const last = history[history.length - 1]
    const before = history[history.length - 2]
    const rate = (field) => before ? (last[field] - before[field]) / ((last.at - before.at) / 1000) : 0
    const fsync = before && last.fsyncCount > before.fsyncCount
      ? `${(1000 * (last.fsyncSum - before.fsyncSum) / (last.fsyncCount - before.fsyncCount)).toFixed(2)} ms`
      : "—"
    cards.replaceChildren(
      card("live recordings", overview.live),
      card("tokens/s", rate("tokens").toFixed(0)),
      card("bytes/s", `${bytes(Math.round(rate("bytes")))}/s`),
      card("commit fsync (mean, last 2 s)", fsync),
      card("database file", bytes(sum(samples, "tapedeck_database_file_bytes"))),
      card("disk", overview.disk_full ? "FULL: recordings refused" : "ok"),
    )
    drawChart(chart)
    instances.replaceChildren()
    if (overview.instances.length) {
      instances.append(el("h2", "Instances"))
      for (const instance of overview.instances) {
        instances.append(el("p", `${instance.address}${instance.here ? " (this one)" : ""}: running`))
      }
    }
    const nodes = clusterNodes(samples)
    if (nodes.length) {
      instances.append(el("h2", `Cluster nodes (leader: node ${sum(samples, "tapedeck_cluster_leader")})`))
      for (const { id, lag, healthy } of nodes) {
        const health = healthy === undefined ? "health unknown" : healthy ? "healthy" : "NOT HEALTHY (silent or far behind)"
        instances.append(el("p", `node ${id}: ${health}, ${lag} entries behind`))
      }
    }
  }
  await tick()
  const timer = setInterval(tick, 2000)
  signal.addEventListener("abort", () => clearInterval(timer))
}

function card(name, value) {
  const node = el("div", undefined, "card")
  node.append(el("div", name, "muted"), el("div", value, "value"))
  return node
}

// The throughput chart's size, its margins (for the axes' labels) and the time it spans.
const CHART = { width: 640, height: 170, left: 72, right: 84, top: 10, bottom: 26, spanMs: 300000 }

function drawChart(chart) {
  chart.replaceChildren()
  const svg = (name, attributes, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", name)
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value))
    if (text !== undefined) node.textContent = text
    chart.append(node)
    return node
  }
  const { width, height, left, right, top, bottom, spanMs } = CHART
  const plotWidth = width - left - right
  const plotHeight = height - top - bottom
  const base = top + plotHeight
  const now = Date.now()
  const rates = history.slice(1).map((point, i) => {
    const previous = history[i]
    const seconds = (point.at - previous.at) / 1000
    return {
      at: point.at,
      tokens: (point.tokens - previous.tokens) / seconds,
      bytes: (point.bytes - previous.bytes) / seconds,
    }
  })
  const x = (at) => left + plotWidth * Math.max(0, 1 - (now - at) / spanMs)
  svg("line", { x1: left, y1: base, x2: left + plotWidth, y2: base, class: "axis" })
  for (const [minutes, anchor] of [[5, "start"], [4, "middle"], [3, "middle"], [2, "middle"], [1, "middle"], [0, "end"]]) {
    const at = left + plotWidth * (1 - minutes / 5)
    svg("line", { x1: at, y1: base, x2: at, y2: base + 4, class: "axis" })
    svg("text", { x: at, y: height - 6, "text-anchor": anchor, class: "tick" }, minutes ? `${minutes} min ago` : "now")
  }
  const scales = [
    { field: "tokens", axis: left, anchor: "end", offset: -6, label: (v) => `${Math.round(v)} tok/s` },
    { field: "bytes", axis: left + plotWidth, anchor: "start", offset: 6, label: (v) => `${bytes(Math.round(v))}/s` },
  ]
  for (const { field, axis, anchor, offset, label } of scales) {
    const most = niceCeiling(Math.max(0, ...rates.map((r) => r[field])))
    svg("line", { x1: axis, y1: top, x2: axis, y2: base, class: `axis ${field}-axis` })
    for (const share of [0, 0.5, 1]) {
      const y = base - share * plotHeight
      svg("text", { x: axis + offset, y: y + 4, "text-anchor": anchor, class: `tick ${field}-tick` }, label(most * share))
    }
    const points = rates.map((r) => `${x(r.at).toFixed(1)},${(base - (r[field] / most) * plotHeight).toFixed(1)}`)
    svg("polyline", { class: field, points: points.join(" ") })
  }
}

// The smallest of 1, 2 or 5 times a power of ten at or above `n` (and at least 1): an axis's top.
function niceCeiling(n) {
  if (n <= 1) return 1
  const power = 10 ** Math.floor(Math.log10(n))
  return [1, 2, 5, 10].map((m) => m * power).find((top) => top >= n)
}

showWho()
route()
