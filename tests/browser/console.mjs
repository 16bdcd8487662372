// Drives headless Chromium through tapedeck's console for tests/http_api/console.rs. Usage:
//   node console.mjs operate BASE SHOTS_DIR
//     prints "ready" once the list shows the recordings made before; then waits for
//     `live-2` to appear live, opens it, prints "opened" once its first token shows, waits
//     for the rest and for its length to show, saves screenshots (the overview's too), stops it (accepting the confirmation) and prints
//     "stopped"; deletes `doomed` and prints "tombstone" once its page shows one; last, one
//     JSON line: what ran of the hostile id and content (nothing should) on the list, the
//     hostile id's page and `doomed`'s, each looked at before any reload, and after.
//   node console.mjs access BASE GRANT
//     prints what the list shows without a credential, then with GRANT entered, as JSON.
import { chromium } from "playwright-core"

const [mode, base, arg] = process.argv.slice(2)
const executablePath = process.env.TAPEDECK_TEST_CHROMIUM ?? "/usr/bin/chromium"
const timeout = 20000

const browser = await chromium.launch({
  executablePath,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
})
try {
  const tab = await browser.newPage({ viewport: { width: 1200, height: 700 } })
  const violations = []
  tab.on("console", (message) => { if (message.type() === "error") violations.push(message.text()) })
  tab.on("dialog", (dialog) => dialog.accept())
  const row = (id) => tab.locator("tr", { has: tab.locator(`td:first-child a`, { hasText: id }) })
  if (mode === "operate") {
    await tab.goto(`${base}/console/`)
    await row("doomed").first().waitFor({ timeout })
    // What ran of the hostile id and content, and what markup they made, on each page that
    // shows them, before any reload could clear `window.pwned`: the list, the hostile id's own
    // page, then `doomed`'s.
    const ran = []
    const markup = []
    const look = async () => {
      ran.push(await tab.evaluate(() => window.pwned ?? null))
      markup.push(await tab.evaluate(() => document.querySelectorAll("#view img, #view script").length))
    }
    await look()
    await row("x<img").first().locator("a").click()
    await tab.locator("#content", { hasText: "<script>" }).waitFor({ timeout })
    await look()
    await tab.goto(`${base}/console/`)
    await row("doomed").first().waitFor({ timeout })
    console.log("ready")
    await tab.locator("section h2", { hasText: "Live" }).waitFor({ timeout })
    await row("live-2").first().waitFor({ timeout })
    await tab.screenshot({ path: `${arg}/console-list.png` })
    await row("live-2").first().locator("a").click()
    await tab.locator("#content", { hasText: "first " }).waitFor({ timeout })
    console.log("opened")
    await tab.locator("#content", { hasText: "first second third" }).waitFor({ timeout })
    await tab.locator("dd", { hasText: "18" }).first().waitFor({ timeout })
    // Its readers, once the row is fetched again while the console follows the content.
    await tab.waitForTimeout(1500)
    const watchedReaders = await tab.locator("dt", { hasText: "readers" })
      .locator("xpath=following-sibling::dd[1]").first().textContent()
    await tab.screenshot({ path: `${arg}/console-recording.png` })
    await tab.goto(`${base}/console/#/overview`)
    await tab.locator(".card", { hasText: "live recordings" }).locator(".value", { hasText: "1" }).waitFor({ timeout })
    await tab.waitForTimeout(2500)
    await tab.screenshot({ path: `${arg}/console-overview.png` })
    await tab.goto(`${base}/console/#/recordings/live-2`)
    await tab.locator("#content", { hasText: "first second third" }).waitFor({ timeout })
    await tab.locator("#stop").click()
    await tab.locator("dd", { hasText: "cancelled" }).first().waitFor({ timeout })
    console.log("stopped")
    await tab.goto(`${base}/console/#/recordings/doomed`)
    await tab.locator("#content", { hasText: "<img" }).waitFor({ timeout })
    await look()
    // The page deletes in the background: a reload before its DELETE is answered would
    // abort it.
    const deleted = tab.waitForResponse((r) => r.request().method() === "DELETE", { timeout })
    await tab.locator("#delete").click()
    await deleted
    await tab.goto(`${base}/console/#/recordings/doomed`)
    await tab.reload()
    await tab.locator("span.tombstone").waitFor({ timeout })
    console.log("tombstone")
    await look()
    console.log(JSON.stringify({
      ran: ran.find((value) => value !== null) ?? null,
      markup: Math.max(...markup),
      pages: ran.length,
      watchedReaders,
      violations,
    }))
  } else if (mode === "access") {
    await tab.goto(`${base}/console/`)
    await tab.locator("#sign-in").waitFor({ state: "visible", timeout })
    // What the first screen says besides asking for a credential, once its calls are answered.
    await tab.waitForTimeout(500)
    const firstError = (await tab.locator("#error").textContent()) ?? ""
    const anonymous = await tab.locator("table tr[data-id]").count()
    await tab.selectOption("#cred-kind", "grant")
    await tab.fill("#cred-value", arg)
    await tab.click("#cred-use")
    await tab.locator("h2", { hasText: "All recordings" }).waitFor({ timeout })
    await tab.locator("table tr[data-id]").first().waitFor({ timeout })
    const listed = await tab.locator("table tr[data-id]").evaluateAll((rows) => rows.map((r) => r.dataset.id))
    const url = tab.url()
    console.log(JSON.stringify({ anonymous, listed, url, firstError }))
  }
} finally {
  await browser.close()
}
