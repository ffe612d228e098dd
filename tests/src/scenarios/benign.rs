//! Scenario traces: benign (being written).
