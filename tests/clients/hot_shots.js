// DogStatsD tags through the npm `hot-shots` client. Usage: node hot_shots.js HOST PORT.
'use strict';
const StatsD = require('hot-shots');
const readline = require('readline');

const LOAD = [['s0', 'k-hot', 40], ['s0', 'k-a', 10], ['s1', 'k-b', 10], ['s2', 'k-b', 10], ['s3', 'k-b', 10]];
const [host, port] = process.argv.slice(2);
const client = new StatsD({
  host,
  port: Number(port),
  errorHandler: (e) => { console.error(e); process.exit(1); },
});

console.log('ready');
readline.createInterface({ input: process.stdin }).once('line', (line) => {
  if (line.trim() !== 'go') { console.error(`expected go, got ${line}`); process.exit(1); }
  for (const [shard, key, n] of LOAD) {
    for (let i = 0; i < n; i++) client.timing('rpc.users.latency', 12, { shard, key });
  }
  client.close((err) => {
    if (err) { console.error(err); process.exit(1); }
    console.log('done');
    process.exit(0);
  });
});
