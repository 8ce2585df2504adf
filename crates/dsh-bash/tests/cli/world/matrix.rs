//! Runs one attack over {landlock, bwrap} × {root, nobody} and reports every failing cell.
//!
//! A cell whose runner cannot start is skipped with the reason printed, unless
//! `DSH_SANDBOX_REQUIRE_RUNNERS` (comma-separated runner names; CI sets `landlock,bwrap`) names
//! the runner, or it is unset under `CI=true`: then the cell fails. Whether a cell's runner starts is probed once per test
//! process, by confining `true`.

use std::any::Any;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, RwLock};

use super::cell::{Cell, Runner, User, World};
use super::host;

/// Why an attack did not run in a cell (printed, never silent).
#[derive(Clone, Debug)]
pub struct Skip(pub String);

/// An attack against one cell: `Ok` when the world held, a panic when it did not.
pub type Attack = fn(&World) -> Result<(), Skip>;

const CELLS: [Cell; 4] = [
    Cell { runner: Runner::Landlock, user: User::Root },
    Cell { runner: Runner::Landlock, user: User::Nobody },
    Cell { runner: Runner::Bwrap, user: User::Root },
    Cell { runner: Runner::Bwrap, user: User::Nobody },
];

/// Held shared by every matrix run and exclusively by one that loads the host on purpose (a
/// fork bomb, a memory hog): such an attack never runs beside another, whose processes it
/// would starve.
static HOST_LOAD: RwLock<()> = RwLock::new(());

/// Held by a test outside the matrix whose processes must be scheduled within a bound (a
/// killed harness's command tree ends within 2 s): it waits out an attack that loads the host
/// on purpose, as a matrix run does.
pub fn beside_host_load() -> std::sync::RwLockReadGuard<'static, ()> {
    HOST_LOAD.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `attack` in every cell; panics listing every cell that failed.
pub fn over_matrix(test: &str, attack: Attack) {
    let _shared = HOST_LOAD.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    run_cells(test, attack);
}

/// [`over_matrix`] for an attack that loads the whole host (a fork bomb, a memory hog): it
/// runs while no other matrix attack does.
pub fn over_matrix_alone(test: &str, attack: Attack) {
    let _exclusive = HOST_LOAD.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    run_cells(test, attack);
}

fn run_cells(test: &str, attack: Attack) {
    let mut failures = Vec::new();
    for cell in CELLS {
        match availability(cell) {
            Availability::Usable => {}
            Availability::Skip(reason) => {
                eprintln!("SKIP {test} [{cell}]: {reason}");
                continue;
            }
            Availability::Fail(reason) => {
                failures.push(format!("[{cell}] {reason}"));
                continue;
            }
        }
        let world = World::new(cell);
        match catch_unwind(AssertUnwindSafe(|| attack(&world))) {
            Ok(Ok(())) => {}
            Ok(Err(Skip(reason))) => eprintln!("SKIP {test} [{cell}]: {reason}"),
            Err(panic) => failures.push(format!("[{cell}] {}", panic_text(panic.as_ref()))),
        }
    }
    assert!(
        failures.is_empty(),
        "{test}: {} of {} cells failed:\n{}",
        failures.len(),
        CELLS.len(),
        failures.join("\n")
    );
}

fn panic_text(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(non-text panic)".to_owned())
}

#[derive(Clone, Debug)]
enum Availability {
    Usable,
    Skip(String),
    Fail(String),
}

fn availability(cell: Cell) -> Availability {
    static KNOWN: OnceLock<Mutex<HashMap<Cell, Availability>>> = OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    if let Some(found) = known.lock().expect("availability lock").get(&cell) {
        return found.clone();
    }
    let found = catch_unwind(|| probe(cell)).unwrap_or_else(|panic| {
        Availability::Fail(format!("probing the cell failed: {}", panic_text(panic.as_ref())))
    });
    known.lock().expect("availability lock").insert(cell, found.clone());
    found
}

fn probe(cell: Cell) -> Availability {
    if !host::is_root() {
        return Availability::Skip(
            "the tests are not running as root (this suite runs dsh-bash as root, and as nobody through runuser)"
                .into(),
        );
    }
    if cell.user == User::Nobody {
        if host::nobody_ids().is_none() {
            return Availability::Skip("this host has no `nobody` user".into());
        }
        if host::runuser().is_none() {
            return Availability::Skip("runuser (util-linux) is not installed".into());
        }
    }
    let world = World::new(cell);
    let outcome = world.bash("true");
    if outcome.runner_unavailable() {
        let reason =
            format!("runner {} cannot start: {}{}", cell.runner.name(), outcome.text, host_hints(cell));
        if required(cell.runner) {
            return Availability::Fail(format!(
                "{reason} (required by DSH_SANDBOX_REQUIRE_RUNNERS or CI=true)"
            ));
        }
        return Availability::Skip(reason);
    }
    if outcome.is_error || outcome.exit_code != Some(0) || !outcome.stdout.is_empty() {
        return Availability::Fail(format!("confining `true` answered unexpectedly: {outcome:?}"));
    }
    Availability::Usable
}

fn required(runner: Runner) -> bool {
    dsh_test_support::sandbox::runner_required(runner.name())
}

/// What about this host explains a runner that cannot start.
fn host_hints(cell: Cell) -> String {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    let mut hints = Vec::new();
    match cell.runner {
        Runner::Bwrap => {
            if host::find_tool("bwrap", "/usr/local/bin:/usr/bin:/bin", User::Root).is_none() {
                hints.push("bwrap is not installed".to_owned());
            }
        }
        Runner::Landlock => {
            if let Some(lsm) = read("/sys/kernel/security/lsm").filter(|l| !l.contains("landlock")) {
                hints.push(format!("Landlock is not an active LSM ({lsm})"));
            }
        }
    }
    if cell.user == User::Nobody {
        if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
            hints.push("host reason: user namespaces are disabled (user.max_user_namespaces = 0)".into());
        }
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            hints.push("host reason: unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)".into());
        }
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            hints.push("host reason: AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)".into());
        }
    }
    if hints.is_empty() { String::new() } else { format!(" [{}]", hints.join("; ")) }
}
