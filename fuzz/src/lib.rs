//! Fuzz targets for every parser of the agent: the StatsD datagram, the NDJSON body, OTLP
//! protobuf traces and metrics, OTLP JSON, the scrape page, the fleet input's PromQL answer and
//! the configuration loader.
//!
//! Each target is a function of one input's bytes that must not panic, hang or grow without
//! bound, whatever the bytes; where two code paths must agree (the protobuf span walker and
//! prost, the block NDJSON scanner and the per-line parser) the target asserts it, so a
//! disagreement is a crash the fuzzer reports. Each `src/bin/<target>.rs` is a plain binary
//! that runs its target once on stdin; built with `cargo afl build --features afl` it runs
//! under AFL in persistent mode instead. `tests/corpus.rs` runs every file of `corpus/` and
//! `regressions/` through its target, so `cargo test` keeps every finding fixed without AFL.
//!
//! The targets sit outside the flow (`Observation -> Window -> ...`): they call the ingest
//! stages' parsers exactly as the receivers do and drop what they produce.

use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use skewwatch::app::Config;
use skewwatch::ingest::otlp::{self, Mapping, metrics::Cumulative, traces};
use skewwatch::ingest::scrape::{self, ScrapeJob};
use skewwatch::ingest::statsd::config::StatsdMapping;
use skewwatch::ingest::statsd::mapping::Mapper;
use skewwatch::ingest::{ndjson, statsd};
use skewwatch_detectors::observation::{Batch, Rejections};

/// A fuzz target: one input's bytes in, nothing out; a panic is a finding.
pub type Target = fn(&[u8]);

/// Every target by its name: the name of its binary and of its `corpus/` and `regressions/`
/// folders.
pub const TARGETS: &[(&str, Target)] = &[
    ("statsd", statsd_datagram),
    ("ndjson", ndjson_body),
    ("otlp_traces", otlp_traces_protobuf),
    ("otlp_metrics", otlp_metrics_protobuf),
    ("otlp_json", otlp_json),
    ("scrape", scrape_page),
    ("config", config_yaml),
    ("fleet", fleet_answer),
];

/// Runs `target` the way its binary is built: under AFL in persistent mode with the `afl`
/// feature, else once on all of stdin.
#[cfg(feature = "afl")]
pub fn run(target: Target) {
    afl::fuzz!(|data: &[u8]| target(data));
}

/// Runs `target` the way its binary is built: under AFL in persistent mode with the `afl`
/// feature, else once on all of stdin.
#[cfg(not(feature = "afl"))]
pub fn run(target: Target) {
    use std::io::Read;
    let mut input = Vec::new();
    if let Err(error) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("cannot read the input from stdin: {error}");
        std::process::exit(2);
    }
    target(&input);
}

/// Configuration the targets share: StatsD mappings (a glob and a regex, with captures and
/// tag templates) and a scrape job reading a counter and a histogram with every label.
const TARGET_CONFIG: &str = r#"
statsd:
  mappings:
    - match: "db.*.query_time"
      types: [ms, h, d]
      group: orders-db
      shard: "$1"
      key: "${tag:table}"
      outcome: "${tag:outcome}"
    - match: 'cache\.([a-z]+)\.(get|set)'
      match_type: regex
      types: [c]
      group: "${tag:service}-cache"
      shard: "$1-$2"
      cache: "${tag:cache}"
scrape:
  - name: db
    url: "http://127.0.0.1:1/metrics"
    metrics: [db_requests_total, db_request_duration_seconds]
    group_label: cluster
    key_label: table
    outcome_label: outcome
    cache_label: cache
    max_series: 64
"#;

fn target_config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::from_yaml_with_env(TARGET_CONFIG, "fuzz target", &|_| None)
            .expect("the fuzz targets' configuration is valid")
    })
}

fn statsd_mappings() -> Arc<[StatsdMapping]> {
    static MAPPINGS: OnceLock<Arc<[StatsdMapping]>> = OnceLock::new();
    MAPPINGS
        .get_or_init(|| target_config().startup.statsd.mappings.clone().into())
        .clone()
}

fn scrape_job() -> &'static ScrapeJob {
    target_config()
        .startup
        .scrape
        .first()
        .expect("the fuzz targets' configuration has a scrape job")
}

/// Lines of a datagram that are not empty, the most the parser can accept or reject.
fn nonempty_lines(data: &[u8]) -> usize {
    data.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && *l != b"\r")
        .count()
}

/// A StatsD datagram, parsed natively and with mappings: every line is accepted, rejected or
/// (with mappings) skipped, at most once.
pub fn statsd_datagram(data: &[u8]) {
    let lines = nonempty_lines(data);
    let mut batch = Batch::default();
    let mut rejected = Rejections::default();
    let accepted = statsd::parse::parse_datagram(data, &mut batch, &mut rejected);
    let counted = accepted as u64 + rejected.total();
    assert!(
        counted <= lines as u64,
        "{accepted} accepted and {} rejected of {lines} lines",
        rejected.total()
    );

    let mut mapper = Mapper::new(statsd_mappings());
    let mut batch = Batch::default();
    let mut rejected = Rejections::default();
    let mut skipped = 0;
    let accepted = statsd::parse::parse_datagram_mapped(
        data,
        &mut mapper,
        &mut batch,
        &mut rejected,
        &mut skipped,
    );
    let counted = accepted as u64 + rejected.total() + skipped;
    assert!(
        counted <= lines as u64,
        "mapped: {accepted} accepted, {} rejected, {skipped} skipped of {lines} lines",
        rejected.total()
    );
}

/// An NDJSON (or JSON array) body; and the block scanner `replay` uses must give, line by
/// line, what [`ndjson::parse_record`] gives for the same line.
pub fn ndjson_body(data: &[u8]) {
    let mut batch = Batch::default();
    let outcome = ndjson::parse_body(data, &mut batch);
    assert!(outcome.errors.len() <= ndjson::MAX_LINE_ERRORS);
    assert!(outcome.errors.len() as u64 <= outcome.rejected.total());

    let mut scanned = Vec::new();
    let _ = ndjson::for_each_line(data, |number, record| {
        scanned.push((number, format!("{record:?}")));
        ControlFlow::<()>::Continue(())
    });
    let one_by_one: Vec<(usize, String)> = data
        .split(|&b| b == b'\n')
        .enumerate()
        // A blank line (and the empty piece after a final newline) is no record.
        .filter(|(_, line)| {
            !line
                .iter()
                .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        })
        .map(|(i, line)| (i, format!("{:?}", ndjson::parse_record(line))))
        .collect();
    assert_eq!(
        scanned, one_by_one,
        "the block scanner and the per-line parser disagree"
    );
}

/// A protobuf `ExportTraceServiceRequest`: the zero-copy walker must map it exactly as
/// prost's decoding mapped by [`traces::map_request`] whenever both can read it.
pub fn otlp_traces_protobuf(data: &[u8]) {
    let m = Mapping::default();
    let mut walked = Batch::default();
    let walker = traces::decode_protobuf(data, &m, &mut walked);
    let Ok(request) = ExportTraceServiceRequest::decode(data) else {
        return;
    };
    let mut decoded = Batch::default();
    let reference = traces::map_request(&request, &m, &mut decoded);
    if let Ok(walker) = walker {
        assert_eq!(
            format!("{walker:?} {walked:?}"),
            format!("{reference:?} {decoded:?}"),
            "the protobuf walker and prost disagree"
        );
    }
}

/// A protobuf `ExportMetricsServiceRequest`, sent twice, so the second turns cumulative
/// points into deltas against the first.
pub fn otlp_metrics_protobuf(data: &[u8]) {
    let m = Mapping::default();
    let mut cumulative = Cumulative::new(m.max_cumulative_series, 1);
    for _ in 0..2 {
        let mut batch = Batch::default();
        if otlp::metrics::decode_protobuf(data, &m, &mut cumulative, &mut batch).is_err() {
            return;
        }
    }
}

/// An OTLP/JSON body, read both as a traces and as a metrics request.
pub fn otlp_json(data: &[u8]) {
    let m = Mapping::default();
    let _ = traces::decode_json(data, &m, &mut Batch::default());
    let mut cumulative = Cumulative::new(m.max_cumulative_series, 1);
    for _ in 0..2 {
        let mut batch = Batch::default();
        if otlp::metrics::decode_json(data, &m, &mut cumulative, &mut batch).is_err() {
            return;
        }
    }
}

/// Two scrapes of a Prometheus text page (the input split at its first NUL byte; without
/// one, the same page twice): what each series grew by becomes observations.
pub fn scrape_page(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        // The scrape task refuses a page that is not UTF-8 before parsing it.
        return;
    };
    let (first, second) = text.split_once('\0').unwrap_or((text, text));
    let job = scrape_job();
    let mut series = scrape::Series::default();
    for page in [first, second] {
        let page = scrape::parse_page(page);
        let mut batch = Batch::default();
        let mut rejected = Rejections::default();
        series.observe(job, &page, &mut batch, &mut rejected);
        assert!(series.len() <= job.max_series);
    }
}

/// A PromQL API answer as the fleet input reads it, rebuilt into observations as every family
/// at once: the records must add up to the sums read, whatever the answer holds.
pub fn fleet_answer(data: &[u8]) {
    use skewwatch::ingest::fleet::query::{Family, parse_answer};
    use skewwatch::ingest::fleet::rebuild::Growth;
    let Ok(series) = parse_answer(data, 10_000) else {
        return;
    };
    let mut growth = Growth::default();
    for family in Family::ALL {
        growth.add(family, &series, 0, &|_| true, &mut |_| {});
    }
    let mut batch = Batch::default();
    growth.records(&mut batch);
    assert_eq!(batch.requests(), growth.requests());
    for obs in batch.iter() {
        assert!(obs.validate().is_ok(), "{obs:?}");
    }
}

/// A configuration file, parsed and validated as `skewwatch run --config` does (secrets from
/// an empty environment).
pub fn config_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Config::from_yaml_with_env(text, "fuzz input", &|_| None);
}
