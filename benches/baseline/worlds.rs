//! The worlds `cargo bench --bench baseline` measures beside the plain
//! discrete-event model: `blinkimg-1s`'s fleet (8 workers, 120 jobs, one
//! API) laid out three ways, the layouts the hunt draws.
//!
//! - shared host: the scenario as named, every worker a task on one host;
//! - per-worker hosts: one host (a process) per worker, `hosts = "per_worker"`;
//! - limiter service: per-worker hosts that ask an AIMD gate run as a
//!   service on its own host, which tells each queued worker it is still
//!   there every 100 ms (the hunt's fleet seed 106 draws the same service).
//!
//! The tests read this file too (`tests/it/speed.rs`), so the guide's table
//! is checked against the very worlds the bench runs.

use retrysim::internals::run::scenario::{self, Scenario};

/// A fleet layout and its label in the bench's table.
pub struct World {
    pub label: &'static str,
    pub scenario: Scenario,
}

/// `blinkimg-1s` with `edit` applied to its TOML table.
fn edited(edit: impl FnOnce(&mut toml::Table)) -> Scenario {
    let mut table: toml::Table =
        toml::from_str(&scenario::blinkimg_1s().to_toml()).expect("a scenario's TOML reads back");
    edit(&mut table);
    Scenario::from_toml(&toml::to_string(&table).expect("a table serialises")).expect("the edited world is valid")
}

fn fleet(table: &mut toml::Table) -> &mut toml::Table {
    table.get_mut("fleet").and_then(|f| f.as_table_mut()).expect("a [fleet] table")
}

/// The limiter service's gate and its settings, as the hunt writes them.
const SERVICE: &str = r#"
[gate]
kind = "aimd"
initial_limit = 2
min_limit = 1
max_limit = 64
increase = 1
backoff_per_mille = 500

[coordinator]
silence = "500ms"
heartbeat = "100ms"
connect_timeout = "500ms"
retry_after = "1s"
lease = "21s"
"#;

/// The three layouts, in the table's order.
pub fn worlds() -> [World; 3] {
    let per_worker = |t: &mut toml::Table| {
        fleet(t).insert("hosts".into(), "per_worker".into());
    };
    [
        World { label: "shared host", scenario: scenario::blinkimg_1s() },
        World { label: "per-worker hosts", scenario: edited(per_worker) },
        World {
            label: "limiter service",
            scenario: edited(|t| {
                per_worker(t);
                let service: toml::Table = toml::from_str(SERVICE).expect("the service's TOML");
                fleet(t).extend(service);
            }),
        },
    ]
}
