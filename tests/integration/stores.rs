//! What differs between stores: which store countersink finds at connect (Apache
//! Cassandra or ScyllaDB, from SUPPORTED and `system.local`), and ScyllaDB's tablets.

use countersink::sink::cql::{CqlSink, StoreKind};
use cqlsim::Persona;

use crate::common::{StoreOptions, config, launch, run_cli, start_cqlsim_as};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_identified_at_connect() {
    for (persona, kind) in [
        (Persona::Cassandra, StoreKind::Cassandra),
        (Persona::Scylla, StoreKind::ScyllaDb),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        let server = start_cqlsim_as(&mut config, "poses as each store", persona)
            .await
            .into_sim();
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

/// A counter table in a keyspace with tablets: no warning on a ScyllaDB release that
/// lists `COUNTERS_WITH_TABLETS`; on one that does not (the same data, served by such a
/// release: ScyllaDB 6.0's first releases took such tables silently), the start warns,
/// naming the table and the remedy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_table_in_a_tablets_keyspace_is_warned_about_unless_the_release_supports_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families.clear();
    let serve = |counters_with_tablets| cqlsim::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: Some(data.path().to_owned()),
        persona: Persona::Scylla,
        counters_with_tablets,
        ..Default::default()
    };
    let server = cqlsim::Server::start(serve(true)).await.unwrap();
    // NetworkTopologyStrategy: tablets by default on this persona.
    let replication = "{'class': 'NetworkTopologyStrategy', 'datacenter1': 1}";
    for statement in countersink::ddl::statements(&config, replication).unwrap() {
        server.execute(None, &statement).unwrap();
    }
    let mut warnings_of = async |server: &cqlsim::Server| {
        config.store.contact_points = vec![server.local_addr().to_string()];
        let engine = countersink::engine::Engine::new(&config).unwrap();
        let sink = CqlSink::connect(&config.store, engine.families())
            .await
            .unwrap();
        sink.schema_warnings().to_vec()
    };
    let warnings = warnings_of(&server).await;
    assert!(warnings.is_empty(), "supported here: {warnings:?}");
    server.shutdown().await.unwrap();

    let server = cqlsim::Server::start(serve(false)).await.unwrap();
    let warnings = warnings_of(&server).await;
    assert_eq!(warnings.len(), 2, "one per table: {warnings:?}");
    assert!(
        warnings[0].contains("countersink.counts_by_")
            && warnings[0].contains("COUNTERS_WITH_TABLETS")
            && warnings[0].contains("'enabled': false"),
        "{warnings:?}"
    );
    server.shutdown().await.unwrap();
}

/// Without that release, ScyllaDB refuses the counter table in a tablets keyspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylladb_refuses_counter_tables_in_tablets_keyspaces() {
    let server = launch(StoreOptions {
        persona: Persona::Scylla,
        ..StoreOptions::cqlsim_only("poses as ScyllaDB")
    })
    .await
    .into_sim();
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

/// `schema --apply` finds ScyllaDB and, on a release that refuses counters with tablets,
/// creates its keyspaces with tablets disabled, so the counter tables can be created in
/// a `NetworkTopologyStrategy` keyspace (the production replication), where ScyllaDB would
/// otherwise use tablets and refuse them. On a release that supports them, new keyspaces
/// take the cluster's tablets setting (here: tablets, enforced or not), and the tables are
/// created in them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_apply_disables_tablets_on_scylladb_only_where_counters_need_it() {
    use cqlsim::TabletsMode::{Enabled, Enforced};
    for (counters_with_tablets, tablets_mode, uses_tablets, said) in [
        (false, Enabled, false, "tablets disabled"),
        (true, Enabled, true, "the cluster's tablets setting"),
        (true, Enforced, true, "the cluster's tablets setting"),
    ] {
        let case = format!("{counters_with_tablets} {tablets_mode:?}");
        let server = launch(StoreOptions {
            persona: Persona::Scylla,
            counters_with_tablets,
            tablets_mode,
            ..StoreOptions::cqlsim_only("poses as ScyllaDB")
        })
        .await
        .into_sim();
        let out = apply_schema(&server);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{case}: {stdout}\n{stderr}");
        assert!(stdout.contains(said), "{case}: {stdout}");
        assert!(stderr.contains("ScyllaDB"), "{case}: {stderr}");
        let tablets = server
            .execute(
                None,
                "SELECT keyspace_name FROM system_schema.scylla_keyspaces",
            )
            .unwrap();
        assert_eq!(!tablets.is_empty(), uses_tablets, "{case}");
        assert!(
            server
                .execute(None, "SELECT * FROM countersink.counts_by_minute")
                .is_ok(),
            "{case}"
        );
        server.shutdown().await.unwrap();
    }
}

/// `schema --apply` connects as `serve` does: the same credential rules (a user needs a
/// password, from the environment or the password file), the same TLS settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_apply_uses_the_credentials_of_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let store = launch(StoreOptions::default()).await;
    let config = dir.path().join("countersink.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\ncontact_points = [\"{}\"]\nusername = \"ops\"\n",
            store.contact_point()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(crate::common::BIN)
        .args(["schema", "--apply", "--config"])
        .arg(&config)
        .env_remove(countersink::sink::cql::session::PASSWORD_ENV)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no password"), "{stderr}");
    store.shutdown().await;
}

/// A ScyllaDB cluster that enforces tablets for new keyspaces, on a release that refuses
/// counters with tablets: `schema --apply` fails with what to change, naming the setting
/// and the feature, instead of the store's bare refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_apply_on_a_cluster_enforcing_tablets_says_what_to_change() {
    let server = launch(StoreOptions {
        persona: Persona::Scylla,
        tablets_mode: cqlsim::TabletsMode::Enforced,
        ..StoreOptions::cqlsim_only("poses as ScyllaDB")
    })
    .await
    .into_sim();
    let out = apply_schema(&server);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for needed in [
        "tablets_mode_for_new_keyspaces: enforced",
        "COUNTERS_WITH_TABLETS",
        "`enabled`",
        "upgrade",
    ] {
        assert!(stderr.contains(needed), "{needed:?} in {stderr}");
    }
    server.shutdown().await.unwrap();
}

/// `schema --apply` against `server` with a `NetworkTopologyStrategy` replication.
fn apply_schema(server: &cqlsim::Server) -> std::process::Output {
    run_cli([
        "schema",
        "--apply",
        "--contact-point",
        &server.local_addr().to_string(),
        "--replication",
        "{'class': 'NetworkTopologyStrategy', 'datacenter1': 1}",
    ])
}
