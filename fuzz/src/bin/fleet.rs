//! Fuzz target `fleet`: a PromQL API answer as the fleet input reads it (see
//! [`skewwatch_fuzz::fleet_answer`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::fleet_answer);
}
