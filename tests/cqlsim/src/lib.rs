//! cqlsim: a single-node, in-memory CQL native protocol v4 server with Cassandra's counter
//! rules, fault injection and statistics. It is a test and development store, **not a
//! production database**.
