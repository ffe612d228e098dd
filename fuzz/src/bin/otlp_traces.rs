//! Fuzz target `otlp_traces`: an OTLP protobuf traces request (see [`skewwatch_fuzz::otlp_traces_protobuf`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::otlp_traces_protobuf);
}
