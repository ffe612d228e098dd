//! Fuzz target `ndjson`: an NDJSON body (see [`skewwatch_fuzz::ndjson_body`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::ndjson_body);
}
