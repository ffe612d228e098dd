//! Fuzz target `otlp_metrics`: an OTLP protobuf metrics request (see [`skewwatch_fuzz::otlp_metrics_protobuf`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::otlp_metrics_protobuf);
}
