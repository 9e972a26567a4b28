// Node's built-in fetch in a small retry loop, in front of `retrysim serve`:
// the loop most people write. Up to 10 attempts per job; on a
// 429 wait Retry-After (seconds) plus up to 100 ms; on a network error retry
// after 100 ms; any other answer ends the job. Each job's requests carry
// `x-retrysim-client: node-fetch job-<n>` and, unless --no-keys, one
// Idempotency-Key per job. Prints one JSON line; the verdict is the server's.
//
//   node fetch_client.mjs [--jobs 100] [--workers 4] [--no-keys] --url URL
import { randomUUID } from "node:crypto";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const url = opt("--url");
const jobs = Number(opt("--jobs", 100));
const workers = Number(opt("--workers", 4));
const keys = !args.includes("--no-keys");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function job(n) {
  const headers = {
    "content-type": "application/json",
    "x-api-key": "key-a",
    "x-retrysim-client": `node-fetch job-${n}`,
  };
  if (keys) headers["idempotency-key"] = randomUUID();
  const body = JSON.stringify({ uploadId: `u${n}`, options: { op: "compress" } });
  let last = "none";
  for (let attempt = 0; attempt < 10; attempt++) {
    try {
      const res = await fetch(`${url}/v1/jobs`, { method: "POST", headers, body, signal: AbortSignal.timeout(5000) });
      await res.arrayBuffer();
      last = String(res.status);
      if (res.ok) return last;
      if (res.status !== 429) return last;
      const wait = Number(res.headers.get("retry-after") ?? "1");
      await sleep((Number.isFinite(wait) ? wait : 1) * 1000 + Math.random() * 100);
    } catch (e) {
      last = e.name;
      await sleep(100);
    }
  }
  return last;
}

let next = 0;
const outcomes = {};
await Promise.all(
  Array.from({ length: workers }, async () => {
    while (next < jobs) {
      const outcome = await job(next++);
      outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
    }
  }),
);
const succeeded = Object.entries(outcomes).reduce((s, [o, k]) => s + (o.startsWith("2") ? k : 0), 0);
console.log(JSON.stringify({ client: "node-fetch", jobs, succeeded, outcomes }));
