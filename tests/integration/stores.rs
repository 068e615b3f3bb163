//! What differs between stores: which store countersink finds at connect (Apache
//! Cassandra or ScyllaDB, from SUPPORTED and `system.local`), and ScyllaDB's tablets.

use countersink::sink::cql::{CqlSink, StoreKind};
use cqlsim::Persona;

use crate::common::{StoreOptions, config, launch, start_store_as};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_identified_at_connect() {
    for (persona, kind) in [
        (Persona::Cassandra, StoreKind::Cassandra),
        (Persona::Scylla, StoreKind::ScyllaDb),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        let server = start_store_as(&mut config, persona).await;
        let engine = countersink::engine::Engine::new(&config).unwrap();
        let sink = CqlSink::connect(&config.store, engine.families())
            .await
            .unwrap();
        assert_eq!(sink.identity().kind, kind, "{persona}: {}", sink.identity());
        assert!(
            sink.schema_warnings().is_empty(),
            "{:?}",
            sink.schema_warnings()
        );
        server.shutdown().await.unwrap();
    }
}

/// A counter table in a keyspace with tablets (a ScyllaDB release that accepts it):
/// the start warns, naming the table and the remedy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_table_in_a_tablets_keyspace_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families.clear();
    let server = launch(StoreOptions {
        persona: Persona::Scylla,
        counters_with_tablets: true,
        ..StoreOptions::default()
    })
    .await;
    // NetworkTopologyStrategy: tablets by default on this persona.
    let replication = "{'class': 'NetworkTopologyStrategy', 'datacenter1': 1}";
    for statement in countersink::ddl::statements(&config, replication).unwrap() {
        server.execute(None, &statement).unwrap();
    }
    config.store.contact_points = vec![server.local_addr().to_string()];
    let engine = countersink::engine::Engine::new(&config).unwrap();
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .unwrap();
    let warnings = sink.schema_warnings();
    assert_eq!(warnings.len(), 2, "one per table: {warnings:?}");
    assert!(
        warnings[0].contains("countersink.counts_by_") && warnings[0].contains("'enabled': false"),
        "{warnings:?}"
    );
    server.shutdown().await.unwrap();
}

/// Without that release, ScyllaDB refuses the counter table in a tablets keyspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylladb_refuses_counter_tables_in_tablets_keyspaces() {
    let server = launch(StoreOptions {
        persona: Persona::Scylla,
        ..StoreOptions::default()
    })
    .await;
    server
        .execute(
            None,
            "CREATE KEYSPACE t WITH replication = {'class': 'NetworkTopologyStrategy', 'datacenter1': 1}",
        )
        .unwrap();
    let refused = server
        .execute(None, "CREATE TABLE t.c (k text PRIMARY KEY, n counter)")
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("Counters are not yet supported with tablets"),
        "{refused}"
    );
    server
        .execute(
            None,
            "CREATE KEYSPACE v WITH replication = {'class': 'NetworkTopologyStrategy', 'datacenter1': 1} AND tablets = {'enabled': false}",
        )
        .unwrap();
    server
        .execute(None, "CREATE TABLE v.c (k text PRIMARY KEY, n counter)")
        .unwrap();
    server.shutdown().await.unwrap();
}
