//! Fuzz target `statsd`: a StatsD datagram (see [`skewwatch_fuzz::statsd_datagram`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::statsd_datagram);
}
