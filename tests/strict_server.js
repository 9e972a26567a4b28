// A stock Node.js `http` server for tests/it/real_servers.rs: what a user's
// service looks like. Node itself answers 400 to an HTTP/1.1 request without
// a Host header; the routes below match the origin-form path, as an ordinary
// Node app does, so an absolute-form target (`POST http://h:p/v1/jobs`) finds
// no route.
//
//   node tests/strict_server.js   -> prints the port it listens on (127.0.0.1)
//
// POST /v1/jobs  -> 201 {"id":N,"key":...}; records the Idempotency-Key
// GET  /stats    -> {"requests":N,"connections":N,"keys":[...]} (jobs only)
// anything else  -> 404
// It exits by itself after 120 s in case the test that started it died.
'use strict';
const http = require('http');

let requests = 0;
let connections = 0;
const keys = [];

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'POST' && req.url === '/v1/jobs') {
      requests += 1;
      const key = req.headers['idempotency-key'] || null;
      keys.push(key);
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: requests, key }));
    } else if (req.method === 'GET' && req.url === '/stats') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ requests, connections, keys }));
    } else {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 'NOT_FOUND', message: `no route for ${req.method} ${req.url}` } }));
    }
  });
});
server.on('connection', () => {
  connections += 1;
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${server.address().port}\n`);
});
setTimeout(() => process.exit(0), 120000);
