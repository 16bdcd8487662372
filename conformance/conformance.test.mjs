// The Durable Streams server conformance suite, run against the tapedeck at TAPEDECK_HTTP_URL
// (scripts/conformance.sh starts one). The suite's own CLI finds no tests when the package is
// a dependency, so it is called from here.
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.TAPEDECK_HTTP_URL
if (!baseUrl) {
  throw new Error("set TAPEDECK_HTTP_URL to the tapedeck HTTP face, e.g. http://127.0.0.1:4437")
}

runConformanceTests({ baseUrl })
