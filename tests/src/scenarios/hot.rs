//! Scenario traces: hot (being written).
