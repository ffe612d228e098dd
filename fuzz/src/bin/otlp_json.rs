//! Fuzz target `otlp_json`: an OTLP/JSON request (see [`skewwatch_fuzz::otlp_json`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::otlp_json);
}
