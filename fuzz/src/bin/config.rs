//! Fuzz target `config`: a configuration file (see [`skewwatch_fuzz::config_yaml`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::config_yaml);
}
