//! Scenario traces: incidents (being written).
