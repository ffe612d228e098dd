// A null backend for Etsy's statsd used by scripts/compare-statsd.sh: it sends metrics
// nowhere and reports, through the management port's `stats` command, how many packets and
// lines statsd received since it started (its own `statsd.packets_received` and
// `statsd.metrics_received` counters, which statsd resets at every flush, added up).
'use strict';

const flushed = { packets: 0, lines: 0, bad: 0 };
let live = null;
let flushes = 0;

exports.init = function (startupTime, config, events) {
  // Registered before statsd's own per-flush reset, so it sees each interval's counts.
  events.on('flush', function (timestamp, metrics) {
    live = metrics.counters;
    flushed.packets += live['statsd.packets_received'] || 0;
    flushed.lines += live['statsd.metrics_received'] || 0;
    flushed.bad += live['statsd.bad_lines_seen'] || 0;
    flushes += 1;
  });
  events.on('status', function (write) {
    const now = live || {};
    write(null, 'skewwatch', 'flushes', flushes);
    write(null, 'skewwatch', 'packets_received', flushed.packets + (now['statsd.packets_received'] || 0));
    write(null, 'skewwatch', 'metrics_received', flushed.lines + (now['statsd.metrics_received'] || 0));
    write(null, 'skewwatch', 'bad_lines_seen', flushed.bad + (now['statsd.bad_lines_seen'] || 0));
  });
  return true;
};
