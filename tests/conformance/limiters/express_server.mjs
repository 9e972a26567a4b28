// A real express-rate-limit server for retrysim's calibration
// (tests/conformance/limiters/run.sh installs express and express-rate-limit,
// pinned in package.json and package-lock.json, with `npm ci`).
//
// Two endpoints, each limited for the whole fleet (one key for every caller),
// 10 requests per 1 s, each with its own MemoryStore:
//
//   POST /draft8/v1/jobs         standardHeaders: 'draft-8', legacyHeaders: false
//   POST /draft8-legacy/v1/jobs  standardHeaders: 'draft-8', legacyHeaders: true
//
// What express-rate-limit 8.7 then does (read from its source,
// source/memory-store.ts, source/headers.ts, source/rate-limit.ts):
//   the window of a key starts at its first hit (resetTime = now + windowMs)
//   and ends when a hit finds resetTime <= now; every hit counts, refused
//   ones too (skipFailedRequests is false);
//   RateLimit: "10-in-1sec"; r=REMAINING; t=SECONDS and RateLimit-Policy:
//   "10-in-1sec"; q=10; w=1; pk=:…: on every answer, where SECONDS is
//   max(0, ceil((resetTime - now) / 1000));
//   with legacyHeaders also X-RateLimit-Limit, X-RateLimit-Remaining,
//   X-RateLimit-Reset (ceil(resetTime / 1000), Unix seconds) and Date;
//   a refusal is 429 with Retry-After: SECONDS (can be 0 if the window ends
//   between the count and the header) and the body "Too many requests,
//   please try again later." as text/html.
//
// A ledger beside the limiter records every answer of the jobs endpoints:
// each 2xx is one charge against its Idempotency-Key. GET /__stats returns it
// as JSON (the fields tests/conformance/server.py's ledger has) and
// POST /__reset clears it and both limiters.
//
// Usage: node express_server.mjs PORT_FILE. It binds 127.0.0.1 on a free
// port, writes the port to PORT_FILE and serves until it is killed.

import express from 'express'
import { rateLimit } from 'express-rate-limit'
import { writeFileSync, renameSync } from 'node:fs'

const ledger = { requests: 0, limited: 0, other: 0, unkeyed: 0, charges: new Map() }

function clearLedger() {
    ledger.requests = 0
    ledger.limited = 0
    ledger.other = 0
    ledger.unkeyed = 0
    ledger.charges = new Map()
}

function record(status, key) {
    ledger.requests += 1
    if (status >= 200 && status < 300) {
        if (key === undefined) ledger.unkeyed += 1
        else ledger.charges.set(key, (ledger.charges.get(key) ?? 0) + 1)
    } else if (status === 429) {
        ledger.limited += 1
    } else {
        ledger.other += 1
    }
}

function stats() {
    const counts = [...ledger.charges.values()]
    const twice = [...ledger.charges.entries()].filter(([, n]) => n > 1).map(([k]) => k).sort()
    return {
        requests: ledger.requests,
        limited: ledger.limited,
        other: ledger.other,
        charges: counts.reduce((a, b) => a + b, 0) + ledger.unkeyed,
        keys: ledger.charges.size,
        unkeyed_charges: ledger.unkeyed,
        keys_charged_twice: twice.length,
        max_charges_per_key: Math.max(0, ...counts),
        twice_examples: twice.slice(0, 5),
    }
}

const limiters = {
    draft8: rateLimit({ windowMs: 1000, limit: 10, standardHeaders: 'draft-8', legacyHeaders: false, keyGenerator: () => 'fleet' }),
    'draft8-legacy': rateLimit({ windowMs: 1000, limit: 10, standardHeaders: 'draft-8', legacyHeaders: true, keyGenerator: () => 'fleet' }),
}

const app = express()
for (const [name, limiter] of Object.entries(limiters)) {
    app.post(`/${name}/v1/jobs`, (req, res, next) => {
        res.on('finish', () => record(res.statusCode, req.get('idempotency-key')))
        next()
    }, limiter, (req, res) => {
        res.status(201).json({ id: 'job', key: req.get('idempotency-key') ?? null })
    })
}
app.get('/__stats', (req, res) => res.json(stats()))
app.post('/__reset', async (req, res) => {
    clearLedger()
    for (const limiter of Object.values(limiters)) await limiter.resetKey('fleet')
    res.json({ reset: true })
})

const portFile = process.argv[2]
const server = app.listen(0, '127.0.0.1', () => {
    const { port } = server.address()
    if (portFile) {
        writeFileSync(`${portFile}.tmp`, `${port}\n`)
        renameSync(`${portFile}.tmp`, portFile)
    }
    console.log(`listening on http://127.0.0.1:${port}`)
})
